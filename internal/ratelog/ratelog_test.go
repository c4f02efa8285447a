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
	l := New(time.Hour) // no stall of a loaded machine ends it mid-loop
	for i := range 10 {
		l.Warn(logger, "bad peer", "i", i)
	}
	if n := strings.Count(out.String(), "bad peer"); n != 1 {
		t.Fatalf("%d lines within the interval, want 1:\n%s", n, out.String())
	}
	l.mu.Lock()
	l.next = time.Now() // the interval has passed
	l.mu.Unlock()
	l.Warn(logger, "bad peer", "i", 10)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "i=10 suppressed=9") {
		t.Fatalf("after the interval:\n%s", out.String())
	}
	l.mu.Lock()
	l.next = time.Now()
	l.mu.Unlock()
	l.Warn(logger, "bad peer", "i", 11)
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || strings.Contains(lines[2], "suppressed") {
		t.Fatalf("a line with none suppressed before it:\n%s", out.String())
	}
}
