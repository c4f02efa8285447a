package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/wire"
)

// The jobs HTTP API over a real node's HTTP port with Bearer tokens: a read
// token may read but not submit (403 naming role submit); a submitted job
// runs with its env and its logs, status and list are read back; a bad
// body, a bad query and an unknown ID are 400 or 404 naming the bad
// value; a running job is stopped and then deleted, not before.
func TestJobsHTTPAPI(t *testing.T) {
	read, submit := newTestToken(t), newTestToken(t)
	nd := testCluster(t, 1, func(_ int, c *Config) {
		c.HTTPPort = 0
		c.tokens = mapTokens{read: pki.RoleRead, submit: pki.RoleSubmit}
	})[0]
	waitFormed(t, []*Node{nd}, 1, 1)
	do := func(method, path, token, body string) (int, map[string]any) {
		t.Helper()
		code, b := httpDo(t, method, "http://"+nd.HTTPAddr()+path, token, body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			// GET /v1/jobs answers an array.
			var list []any
			if json.Unmarshal(b, &list) != nil {
				t.Fatalf("%s %s: %d, body %q is not JSON", method, path, code, b)
			}
			out = map[string]any{"list": list}
		}
		return code, out
	}
	errOf := func(body map[string]any) string { s, _ := body["error"].(string); return s }

	hello := `{"submission_id": "hello", "entrypoint": "echo hi from $WHO", "runtime_env": {"env_vars": {"WHO": "http"}}}`
	if code, body := do("POST", "/v1/jobs", read, hello); code != http.StatusForbidden || body["role"] != "submit" {
		t.Fatalf("POST /v1/jobs with a read token: %d %v, want 403 naming role submit", code, body)
	}
	if code, _ := do("GET", "/v1/jobs/hello", read, ""); code != http.StatusNotFound {
		t.Fatalf("a refused submit ran: GET answers %d", code)
	}
	for body, want := range map[string]string{
		`{"entrypoint": 5}`:      `"entrypoint" 5`,
		`{"entrypiont": "true"}`: `unknown field "entrypiont"`,
		`{"entrypoint": "true"`:  "unexpected EOF",
		`{}`:                     `"entrypoint" is missing`,
		`{"entrypoint": ["true"], "submission_id": "../x"}`:                                    "../x",
		`{"entrypoint": "true", "entrypoint_num_cpus": 1, "entrypoint_resources": {"CPU": 1}}`: "entrypoint_num_cpus and entrypoint_resources both give CPU",
	} {
		code, resp := do("POST", "/v1/jobs", submit, body)
		if code != http.StatusBadRequest || !strings.Contains(errOf(resp), want) {
			t.Errorf("POST /v1/jobs %s: %d %v, want 400 naming %s", body, code, resp, want)
		}
	}

	code, resp := do("POST", "/v1/jobs", submit, hello)
	if code != http.StatusOK || resp["submission_id"] != "hello" {
		t.Fatalf("POST /v1/jobs: %d %v", code, resp)
	}
	testutil.Until(t, 10*time.Second, "job hello SUCCEEDED", func() error {
		code, j := do("GET", "/v1/jobs/hello", read, "")
		if code != http.StatusOK || j["status"] != string(wire.JobSucceeded) || j["driver_exit_code"] != 0.0 {
			return fmt.Errorf("%d %v", code, j)
		}
		return nil
	})
	if code, logs := do("GET", "/v1/jobs/hello/logs", read, ""); code != http.StatusOK || logs["logs"] != "hi from http\n" || logs["next_offset"] != 13.0 {
		t.Fatalf("GET /v1/jobs/hello/logs: %d %v", code, logs)
	}
	if code, logs := do("GET", "/v1/jobs/hello/logs?offset=3&limit=4", read, ""); code != http.StatusOK || logs["logs"] != "from" {
		t.Fatalf("GET /v1/jobs/hello/logs?offset=3&limit=4: %d %v", code, logs)
	}
	if code, list := do("GET", "/v1/jobs", read, ""); code != http.StatusOK || len(list["list"].([]any)) != 1 {
		t.Fatalf("GET /v1/jobs: %d %v", code, list)
	}
	for path, want := range map[string]struct {
		code int
		name string
	}{
		"/v1/jobs/nope":                       {http.StatusNotFound, "nope"},
		"/v1/jobs/nope/logs":                  {http.StatusNotFound, "nope"},
		"/v1/jobs/hello/logs?offset=-1":       {http.StatusBadRequest, `"-1"`},
		"/v1/jobs/hello/logs?limit=999999999": {http.StatusBadRequest, "999999999"},
	} {
		if code, resp := do("GET", path, read, ""); code != want.code || !strings.Contains(errOf(resp), want.name) {
			t.Errorf("GET %s: %d %v, want %d naming %s", path, code, resp, want.code, want.name)
		}
	}

	// A running job: not deleted, stopped, then deleted.
	if code, resp := do("POST", "/v1/jobs", submit, `{"submission_id": "long", "entrypoint": ["sleep", "600"]}`); code != http.StatusOK {
		t.Fatalf("POST long: %d %v", code, resp)
	}
	if code, resp := do("DELETE", "/v1/jobs/long", submit, ""); code != http.StatusBadRequest || !strings.Contains(errOf(resp), "RUNNING") {
		t.Fatalf("DELETE of a running job: %d %v, want 400 naming RUNNING", code, resp)
	}
	if code, resp := do("POST", "/v1/jobs/long/stop?grace=soon", submit, ""); code != http.StatusBadRequest || !strings.Contains(errOf(resp), "soon") {
		t.Fatalf("stop with a bad grace: %d %v, want 400 naming it", code, resp)
	}
	if code, resp := do("POST", "/v1/jobs/long/stop", read, ""); code != http.StatusForbidden {
		t.Fatalf("stop with a read token: %d %v, want 403", code, resp)
	}
	if code, resp := do("POST", "/v1/jobs/long/stop?grace=100ms", submit, ""); code != http.StatusOK || resp["stopped"] != true {
		t.Fatalf("stop: %d %v", code, resp)
	}
	testutil.Until(t, 10*time.Second, "job long STOPPED", func() error {
		if _, j := do("GET", "/v1/jobs/long", read, ""); j["status"] != string(wire.JobStopped) {
			return fmt.Errorf("%v", j)
		}
		return nil
	})
	if code, resp := do("POST", "/v1/jobs/long/stop", submit, ""); code != http.StatusOK || resp["stopped"] != false {
		t.Fatalf("second stop: %d %v, want stopped false (as Ray's)", code, resp)
	}
	if code, resp := do("DELETE", "/v1/jobs/long", read, ""); code != http.StatusForbidden {
		t.Fatalf("DELETE with a read token: %d %v, want 403", code, resp)
	}
	if code, resp := do("DELETE", "/v1/jobs/long", submit, ""); code != http.StatusOK || resp["deleted"] != true {
		t.Fatalf("DELETE: %d %v", code, resp)
	}
	if code, resp := do("GET", "/v1/jobs/long", read, ""); code != http.StatusNotFound || !strings.Contains(errOf(resp), "long") {
		t.Fatalf("GET a deleted job: %d %v, want 404", code, resp)
	}
}

// FuzzParseJobSubmit feeds arbitrary bodies to POST /v1/jobs's parser: it
// never panics, and what it accepts has an entrypoint.
func FuzzParseJobSubmit(f *testing.F) {
	for _, s := range []string{
		`{"entrypoint": "echo hi", "runtime_env": {"env_vars": {"A": "b"}}}`,
		`{"entrypoint": ["sleep", "1"], "submission_id": "x", "entrypoint_num_cpus": 1, "entrypoint_resources": {"GPU": 1}}`,
		`{"entrypoint": 5}`, `{"entrypoint": null}`, `{"entrypoint": []}`, `[]`, `{"entrypoint": "x"} {}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseJobSubmit(strings.NewReader(string(body)))
		if err == nil && len(req.Entrypoint) == 0 {
			t.Fatalf("accepted %q with no entrypoint", body)
		}
	})
}
