package cluster

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
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
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", n.httpStatus)
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"node_id": n.id.NodeID, "leader": n.leaderAddr()})
	})
	mux.HandleFunc("GET /metrics", n.httpMetrics)
	n.httpServer = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := n.httpServer.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.logger.Warn("HTTP server stopped", "err", err)
		}
	}()
	return nil
}

func (n *Node) httpStatus(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	var st StatusResponse
	if err := n.forward(ctx, MethodStatus, &Empty{}, &st); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, &st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// httpMetrics serves the node's metrics in Prometheus's text exposition
// format (version 0.0.4), which every Prometheus scraper accepts. They are
// three gauges, so they are written here rather than through the Prometheus
// client library, which (with protobuf) put about 2 MiB on the idle node's
// resident memory.
func (n *Node) httpMetrics(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	writeGauges(&b, n.metrics())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// metrics is the node's view of the cluster for /metrics.
func (n *Node) metrics() []gauge {
	members := gauge{name: "nodeup_gossip_members", help: "Gossip members known to this node, by status.", label: "status",
		values: map[string]float64{"alive": 0, "suspect": 0, "dead": 0, "left": 0}}
	for _, m := range n.members.snapshot() {
		members.values[string(m.Status)]++
	}
	leader := gauge{name: "nodeup_raft_leader", help: "1 if this node is the Raft leader.", values: map[string]float64{"": 0}}
	if n.IsLeader() {
		leader.values[""] = 1
	}
	res := gauge{name: "nodeup_node_resource_total", help: "This node's total resources, in resource units (bytes for memory).", label: "resource",
		values: map[string]float64{}}
	for name, q := range n.cfg.Resources {
		res.values[name] = q.Float()
	}
	return []gauge{members, leader, res}
}

// gauge is one Prometheus gauge family: one sample per value of its label,
// or, without a label, the single sample under the key "".
type gauge struct {
	name, help, label string
	values            map[string]float64
}

// writeGauges writes gs in the text exposition format, families sorted by
// name and samples by label value (as the client library orders them).
func writeGauges(b *bytes.Buffer, gs []gauge) {
	gs = slices.Clone(gs)
	slices.SortFunc(gs, func(x, y gauge) int { return cmp.Compare(x.name, y.name) })
	for _, g := range gs {
		if len(g.values) == 0 {
			continue // a family without samples is not exposed
		}
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s gauge\n", g.name, helpEscaper.Replace(g.help), g.name)
		for _, k := range slices.Sorted(maps.Keys(g.values)) {
			b.WriteString(g.name)
			if g.label != "" {
				fmt.Fprintf(b, "{%s=\"%s\"}", g.label, labelEscaper.Replace(k))
			}
			b.WriteByte(' ')
			b.WriteString(formatSample(g.values[k]))
			b.WriteByte('\n')
		}
	}
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// formatSample spells a sample value as the text format does.
func formatSample(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
