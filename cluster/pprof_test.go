package cluster

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPprofOnlyWithEnableDebug: /debug/pprof/ is 404 on a node started
// without EnableDebug, even for an admin token; with it, on a secure
// cluster, no token is 401, a read token 403, an admin token gets the
// profiles.
func TestPprofOnlyWithEnableDebug(t *testing.T) {
	nodes := testCluster(t, 2, func(i int, c *Config) { c.EnableDebug = i == 1 })
	waitFormed(t, nodes, 2, 2)
	admin := createToken(t, nodes[0], "admin", time.Hour).Token
	read := createToken(t, nodes[0], "read", time.Hour).Token

	off := "http://" + nodes[0].HTTPAddr() + "/debug/pprof/"
	for _, tok := range []string{"", admin} {
		if code, body := getWith(t, off, tok); code != http.StatusNotFound {
			t.Fatalf("without --enable-debug: %d %q, want 404", code, body)
		}
	}
	on := "http://" + nodes[1].HTTPAddr() + "/debug/pprof/"
	if code, body := getWith(t, on, ""); code != http.StatusUnauthorized || !strings.Contains(body, "admin") {
		t.Fatalf("no token: %d %q, want 401 naming admin", code, body)
	}
	if code, body := getWith(t, on, read); code != http.StatusForbidden {
		t.Fatalf("read token: %d %q, want 403", code, body)
	}
	if code, body := getWith(t, on, admin); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("admin token: %d %.200q, want the profile index", code, body)
	}
	if code, body := getWith(t, on+"goroutine?debug=1", admin); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("goroutine profile: %d %.200q", code, body)
	}
}
