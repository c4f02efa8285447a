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
