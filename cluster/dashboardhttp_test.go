package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// The dashboard's task and log endpoints: a read token is needed; hostile
// file names in /v1/logs/{node}/{name} and bad limits are 400 naming what
// is accepted, and a listing answers JSON.
func TestDashboardTaskAndLogEndpoints(t *testing.T) {
	read := newTestToken(t)
	nd := testCluster(t, 1, func(_ int, c *Config) {
		c.HTTPPort = 0
		c.tokens = mapTokens{read: pki.RoleRead}
	})[0]
	waitFormed(t, []*Node{nd}, 1, 1)
	get := func(path, token string) (int, map[string]any) {
		t.Helper()
		code, b := httpDo(t, http.MethodGet, "http://"+nd.HTTPAddr()+path, token, "")
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("GET %s: %d, body %q is not a JSON object", path, code, b)
		}
		return code, out
	}
	for _, p := range []string{"/v1/tasks", "/v1/logs", "/v1/logs/n0/worker-0123abcd-0123456789abcdef-1.log"} {
		if code, _ := get(p, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", p, code)
		}
	}
	if code, body := get("/v1/tasks?limit=50", read); code != http.StatusOK || body["Total"] == nil {
		t.Errorf("GET /v1/tasks: %d %v, want 200 with Total", code, body)
	}
	if code, body := get("/v1/tasks?summary=1", read); code != http.StatusOK {
		t.Errorf("GET /v1/tasks?summary=1: %d %v", code, body)
	}
	if code, body := get("/v1/logs", read); code != http.StatusOK {
		t.Errorf("GET /v1/logs: %d %v", code, body)
	}
	for _, c := range []struct{ path, want string }{
		{"/v1/tasks?limit=0", "use 1 to"},
		{"/v1/tasks?limit=x", "use 1 to"},
		{"/v1/tasks?state=SLEEPING", "SLEEPING"},
		{"/v1/logs?job=../x", "job"},
		{"/v1/logs/n0/..%2F..%2Fetc%2Fpasswd", "worker-"},
		{"/v1/logs/n0/%2Fetc%2Fpasswd", "worker-"},
		{"/v1/logs/n0/raft.db", "worker-"},
		{"/v1/logs/n0/worker-0123abcd-0123456789abcdef-1.log?tail=0", "use 1 to"},
	} {
		code, body := get(c.path, read)
		if msg, _ := body["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("GET %s: %d %q, want 400 naming %q", c.path, code, msg, c.want)
		}
	}
	if code, body := get("/v1/logs/n0/worker-0123abcd-0123456789abcdef-1.log", read); code != http.StatusNotFound {
		t.Errorf("GET a log that is not there: %d %v, want 404", code, body)
	}
}

// The dashboard's and the jobs API's errors share one mapping from wire
// codes to HTTP statuses; only what an error without a code becomes
// differs (a peer that did not answer: 503; a job handler's own failure:
// 500).
func TestHTTPStatusOfWireCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{&rpc.Error{Code: wire.CodeNotFound}, http.StatusNotFound},
		{fmt.Errorf("wrapped: %w", &rpc.Error{Code: wire.CodeBadInput}), http.StatusBadRequest},
		{&rpc.Error{Code: wire.CodeInfeasible}, http.StatusBadRequest},
		{&rpc.Error{Code: wire.CodeAlreadyExists}, http.StatusConflict},
		{&rpc.Error{Code: wire.CodeNoLeader}, http.StatusServiceUnavailable},
		{&rpc.Error{Code: wire.CodePermissionDenied}, 599},
		{errors.New("peer gone"), 599},
	} {
		if got := httpStatusOf(c.err, 599); got != c.want {
			t.Errorf("httpStatusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
