package testutil

import (
	"io"
	"log/slog"
	"os"
)

// Logger returns the logger tests give the code under test: silent, or
// debug-level text on stderr when NODEUP_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("NODEUP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Tail returns the last n bytes of s, marked "..." when cut: enough of a
// node's log to see why it failed without burying the test's own output.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
