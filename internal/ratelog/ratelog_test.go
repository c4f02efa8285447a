package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestWarnPassesOneLinePerInterval(t *testing.T) {
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&out, nil))
	l := New(50 * time.Millisecond)
	for i := range 10 {
		l.Warn(logger, "bad peer", "i", i)
	}
	if n := strings.Count(out.String(), "bad peer"); n != 1 {
		t.Fatalf("%d lines within the interval, want 1:\n%s", n, out.String())
	}
	time.Sleep(60 * time.Millisecond)
	l.Warn(logger, "bad peer", "i", 10)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "i=10 suppressed=9") {
		t.Fatalf("after the interval:\n%s", out.String())
	}
}
