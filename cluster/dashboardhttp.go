package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/nodeup/nodeup/dashboard"
	"github.com/nodeup/nodeup/wire"
)

// dashboardTaskLimit bounds the tasks GET /v1/tasks lists (the newest).
const dashboardTaskLimit = 1000

// dashboardLogTail bounds the lines GET /v1/logs/{node}/{name} returns.
const dashboardLogTail = 5000

// handleDashboardHTTP serves the embedded dashboard at "/" and the
// listings it reads besides /v1/status and /v1/jobs: /v1/actors and
// /v1/placement-groups (wire.ActorList, wire.PGList as JSON, as `nodeup
// list actors` and `nodeup list placement-groups`), /v1/tasks (as
// `nodeup list tasks` and `nodeup summary tasks`) and /v1/logs (as
// `nodeup logs`).
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
	n.handleHTTP(mux, "GET /v1/tasks", http.HandlerFunc(n.httpTasks))
	n.handleHTTP(mux, "GET /v1/logs", http.HandlerFunc(n.httpLogList))
	n.handleHTTP(mux, "GET /v1/logs/{node}/{name}", http.HandlerFunc(n.httpLogTail))
}

// httpTasks answers GET /v1/tasks[?job=J&state=S&limit=N&summary=1]: the
// newest N (default 100, at most dashboardTaskLimit) tasks of every node
// as wire.TaskEventsList, or with summary=1 the counts by name and state.
// Bad filters are 400 naming them.
func (n *Node) httpTasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &wire.TaskEventsListRequest{JobID: q.Get("job"), State: q.Get("state"), Limit: 100, Newest: true,
		Summary: q.Get("summary") == "1"}
	if s := q.Get("limit"); s != "" {
		l, err := strconv.Atoi(s)
		if err != nil || l < 1 || l > dashboardTaskLimit {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("limit %q: use 1 to %d", s, dashboardTaskLimit)})
			return
		}
		req.Limit = l
	}
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	out, err := n.taskEvents.List(ctx, req)
	writeResult(w, out, err)
}

// httpLogList answers GET /v1/logs[?job=J]: the current and rotated
// worker and actor log files of every alive node (wire.LogsList).
func (n *Node) httpLogList(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	out, err := n.logsList(ctx, &wire.LogsListRequest{Job: r.URL.Query().Get("job"), Cluster: true})
	writeResult(w, out, err)
}

// logTail is GET /v1/logs/{node}/{name}'s answer: the last lines of one
// file as text (JSON would carry wire.LogsReadReply's bytes as base64).
type logTail struct {
	NodeName string
	Name     string
	Size     int64
	Text     string
}

// httpLogTail answers GET /v1/logs/{node}/{name}[?tail=N]: the last N
// (default 200, at most dashboardLogTail) lines of a log file on node
// (its name, ID or RPC address). The name is checked as Logs.Read checks
// it: a bare log-file name, else 400.
func (n *Node) httpLogTail(w http.ResponseWriter, r *http.Request) {
	tail := 200
	if s := r.URL.Query().Get("tail"); s != "" {
		t, err := strconv.Atoi(s)
		if err != nil || t < 1 || t > dashboardLogTail {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("tail %q: use 1 to %d", s, dashboardLogTail)})
			return
		}
		tail = t
	}
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	node := r.PathValue("node")
	if n.isSelf(node) {
		node = ""
	}
	rep, err := n.logsRead(ctx, &wire.LogsReadRequest{Node: node, Name: r.PathValue("name"), Tail: tail})
	if err != nil {
		writeResult(w, nil, err)
		return
	}
	writeJSON(w, http.StatusOK, logTail{NodeName: rep.NodeName, Name: rep.Name, Size: rep.Size, Text: string(rep.Data)})
}

// writeResult writes out as JSON, or err with the status its code maps
// to (httpStatusOf; 503 for an error without one: a peer did not answer).
func writeResult(w http.ResponseWriter, out any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	writeJSON(w, httpStatusOf(err, http.StatusServiceUnavailable), map[string]string{"error": err.Error()})
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
