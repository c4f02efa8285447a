package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A secure node warns of nothing at start, wherever it binds: core worker
// traffic between machines is TLS now, Python's too; --insecure always
// warns.
func TestOnlyInsecureNodesWarnAtStart(t *testing.T) {
	for _, c := range []struct {
		bind string
	}{{"0.0.0.0"}, {"10.1.2.3"}, {"::"}, {"127.0.0.1"}, {"::1"}} {
		var buf bytes.Buffer
		warnUnauthenticated(slog.New(slog.NewTextHandler(&buf, nil)), c.bind, false)
		if buf.Len() != 0 {
			t.Errorf("bind %s, secure: warned %q", c.bind, buf.String())
		}
		buf.Reset()
		warnUnauthenticated(slog.New(slog.NewTextHandler(&buf, nil)), c.bind, true)
		if !strings.Contains(buf.String(), "--insecure") {
			t.Errorf("bind %s, --insecure: no warning (%q)", c.bind, buf.String())
		}
	}
}
