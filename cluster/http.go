package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// startHTTP serves the JSON API and Prometheus metrics. HTTPPort -1 disables it.
func (n *Node) startHTTP(advertise string) error {
	if n.cfg.HTTPPort < 0 {
		return nil
	}
	ln, err := net.Listen("tcp", hostPort(n.cfg.BindAddr, n.cfg.HTTPPort))
	if err != nil {
		return fmt.Errorf("HTTP port %d on %s: %w", n.cfg.HTTPPort, n.cfg.BindAddr, err)
	}
	n.httpAddr = hostPort(advertise, ln.Addr().(*net.TCPAddr).Port)
	reg := n.metricsRegistry()
	mux := http.NewServeMux()
	n.handleHTTP(mux, "GET /v1/status", http.HandlerFunc(n.httpStatus))
	n.handleHTTP(mux, "GET /v1/health", http.HandlerFunc(n.httpHealth))
	n.handleHTTP(mux, "GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	n.handleJobsHTTP(mux)
	n.handleDashboardHTTP(mux)
	if n.cfg.EnableDebug {
		n.handleHTTP(mux, "GET /debug/pprof/", http.HandlerFunc(pprof.Index))
		n.handleHTTP(mux, "GET /debug/pprof/cmdline", http.HandlerFunc(pprof.Cmdline))
		n.handleHTTP(mux, "GET /debug/pprof/profile", http.HandlerFunc(pprof.Profile))
		n.handleHTTP(mux, "GET /debug/pprof/symbol", http.HandlerFunc(pprof.Symbol))
		n.handleHTTP(mux, "GET /debug/pprof/trace", http.HandlerFunc(pprof.Trace))
		n.logger.Warn("serving Go's profiler on the HTTP port (--enable-debug)", "path", "/debug/pprof/", "needs", "admin token")
	}
	n.httpServer = newHTTPServer(mux)
	n.group.goFunc("http-serve", func() {
		if err := n.httpServer.Serve(netutil.LimitListener(ln, maxHTTPConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.logger.Warn("HTTP server stopped", "err", err)
		}
	})
	return nil
}

// Limits of the HTTP port, whose every byte may be hostile.
const (
	// maxHTTPConns is the most connections served at once; Accept waits
	// while they are open, and the timeouts below free them.
	maxHTTPConns = 256
	// maxHTTPHeader is the most request header bytes read.
	maxHTTPHeader = 16 << 10
	// maxHTTPBody is the most request body bytes a handler may read; the
	// API's requests have none.
	maxHTTPBody = 64 << 10
	// httpReadTimeout bounds reading a request, headers included, and
	// httpWriteTimeout writing its response (status may wait up to
	// forwardTimeout for a leader); httpIdleTimeout closes kept-alive
	// connections that send no further request.
	httpReadTimeout  = 10 * time.Second
	httpWriteTimeout = forwardTimeout + 15*time.Second
	httpIdleTimeout  = 60 * time.Second
)

// newHTTPServer returns the HTTP server for h, with the limits above.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           http.MaxBytesHandler(h, maxHTTPBody),
		ReadHeaderTimeout: httpReadTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    maxHTTPHeader,
	}
}

func (n *Node) httpStatus(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	var st wire.StatusResponse
	if err := n.forward(ctx, wire.MethodStatus, &wire.Empty{}, &st); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, &st)
}

// httpStatusOf is the HTTP status of err's wire code, or otherwise for an
// error that carries no code the endpoint knows how to read: 404 not
// found; 400 bad input, bad request or infeasible; 409 already exists; 503
// no leader, not leader, timeout or overloaded.
func httpStatusOf(err error, otherwise int) int {
	var re *rpc.Error
	if errors.As(err, &re) {
		switch re.Code {
		case wire.CodeNotFound:
			return http.StatusNotFound
		case wire.CodeBadInput, wire.CodeBadRequest, wire.CodeInfeasible:
			return http.StatusBadRequest
		case wire.CodeAlreadyExists:
			return http.StatusConflict
		case wire.CodeNoLeader, wire.CodeNotLeader, wire.CodeTimeout, wire.CodeOverloaded:
			return http.StatusServiceUnavailable
		}
	}
	return otherwise
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// nodeCollector exports the node's view of the cluster to Prometheus.
type nodeCollector struct{ n *Node }

var (
	descMembers  = prometheus.NewDesc("nodeup_gossip_members", "Gossip members known to this node, by status.", []string{"status"}, nil)
	descLeader   = prometheus.NewDesc("nodeup_raft_leader", "1 if this node is the Raft leader.", nil, nil)
	descWritable = prometheus.NewDesc("nodeup_data_dir_writable", "1 if the node's latest writes to its data dir and raft.db succeeded.", nil, nil)
	descResource = prometheus.NewDesc("nodeup_node_resource_total", "This node's total resources, in resource units (bytes for memory).", []string{"resource"}, nil)
)

// Describe implements prometheus.Collector.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMembers
	ch <- descLeader
	ch <- descWritable
	ch <- descResource
}

// Collect implements prometheus.Collector.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]float64{"alive": 0, "suspect": 0, "dead": 0, "left": 0}
	for _, m := range c.n.members.snapshot() {
		counts[string(m.Status)]++
	}
	for s, v := range counts {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, v, s)
	}
	leader := 0.0
	if c.n.IsLeader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	writable := 1.0
	if c.n.Health() != nil {
		writable = 0
	}
	ch <- prometheus.MustNewConstMetric(descWritable, prometheus.GaugeValue, writable)
	res, _ := c.n.settings.get()
	for name, q := range res {
		ch <- prometheus.MustNewConstMetric(descResource, prometheus.GaugeValue, q.Float(), name)
	}
}

// handleHTTP registers h for pattern behind the role wire.HTTPRoles gives
// it. It panics for a pattern without an entry: a programming error every
// test that starts a node finds.
func (n *Node) handleHTTP(mux *http.ServeMux, pattern string, h http.Handler) {
	need, ok := wire.HTTPRoles[pattern]
	if !ok {
		panic("cluster: HTTP endpoint " + pattern + " has no entry in wire.HTTPRoles")
	}
	mux.Handle(pattern, n.requireRole(pattern, need, h))
}

// requireRole wraps h so that, when the node enforces roles (a token
// authority is set), a request must carry "Authorization: Bearer <token>"
// of a role allowing need: none or a token the authority refuses is 401,
// a token of too small a role 403, each with a JSON error naming the
// endpoint and the role it needs. need "" is open to anyone.
func (n *Node) requireRole(pattern string, need pki.Role, h http.Handler) http.Handler {
	if need == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.tokens == nil {
			h.ServeHTTP(w, r)
			return
		}
		refuse := func(status int, why string) {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="nodeup"`)
			}
			writeJSON(w, status, map[string]string{"error": why, "role": string(need)})
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || strings.TrimSpace(token) == "" {
			refuse(http.StatusUnauthorized, fmt.Sprintf("%s needs role %s: send Authorization: Bearer <token> (nodeup token create --role %s)", pattern, need, need))
			return
		}
		p, err := n.auth.token(strings.TrimSpace(token))
		if err != nil {
			refuse(http.StatusUnauthorized, fmt.Sprintf("%s needs role %s: %v", pattern, need, err))
			return
		}
		if !pki.Role(p.Role).Allows(need) {
			refuse(http.StatusForbidden, fmt.Sprintf("%s needs role %s; %s has role %s", pattern, need, p.Name, p.Role))
			return
		}
		h.ServeHTTP(w, r)
	})
}
