package cluster

import (
	"context"
	"net/http"

	"github.com/nodeup/nodeup/dashboard"
	"github.com/nodeup/nodeup/wire"
)

// handleDashboardHTTP serves the embedded dashboard at "/" and the two
// listings it reads besides /v1/status and /v1/jobs: /v1/actors and
// /v1/placement-groups, the same lists as `nodeup list actors` and
// `nodeup list placement-groups` (wire.ActorList, wire.PGList as JSON).
func (n *Node) handleDashboardHTTP(mux *http.ServeMux) {
	n.handleHTTP(mux, "GET /", dashboard.Handler())
	n.handleHTTP(mux, "GET /v1/actors", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out wire.ActorList
		n.httpLeaderList(w, r, wire.MethodActorList, &out)
	}))
	n.handleHTTP(mux, "GET /v1/placement-groups", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out wire.PGList
		n.httpLeaderList(w, r, wire.MethodPGList, &out)
	}))
}

// httpLeaderList answers a GET with the leader's answer to method as JSON,
// 503 naming the cause when no leader answers within forwardTimeout.
func (n *Node) httpLeaderList(w http.ResponseWriter, r *http.Request, method string, out any) {
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	if err := n.forward(ctx, method, &wire.Empty{}, out); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, out)
}
