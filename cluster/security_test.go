package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A node reachable beyond its machine warns at start that core worker
// traffic is not encrypted; one bound to loopback does not; --insecure
// always warns.
func TestUnauthenticatedPortsWarnedUnlessLoopback(t *testing.T) {
	for _, c := range []struct {
		bind string
		warn bool
	}{{"0.0.0.0", true}, {"10.1.2.3", true}, {"::", true}, {"127.0.0.1", false}, {"::1", false}} {
		var buf bytes.Buffer
		warnUnauthenticated(slog.New(slog.NewTextHandler(&buf, nil)), c.bind, false)
		if got := strings.Contains(buf.String(), "not yet encrypted"); got != c.warn {
			t.Errorf("bind %s: warned %v, want %v (%q)", c.bind, got, c.warn, buf.String())
		}
		buf.Reset()
		warnUnauthenticated(slog.New(slog.NewTextHandler(&buf, nil)), c.bind, true)
		if !strings.Contains(buf.String(), "--insecure") {
			t.Errorf("bind %s, --insecure: no warning (%q)", c.bind, buf.String())
		}
	}
}
