package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// logWriter turns the line logs of memberlist and hclog ("[WARN] memberlist:
// ...") into slog records, so a node has one structured log stream.
type logWriter struct {
	logger *slog.Logger
	mu     sync.Mutex
	buf    []byte
}

func newLogWriter(logger *slog.Logger, component string) *logWriter {
	return &logWriter{logger: logger.With("component", component)}
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

func (w *logWriter) emit(line string) {
	level := slog.LevelInfo
	for tag, l := range map[string]slog.Level{"[ERR": slog.LevelError, "[WARN": slog.LevelWarn, "[DEBUG": slog.LevelDebug, "[TRACE": slog.LevelDebug - 4, "[INFO": slog.LevelInfo} {
		if i := strings.Index(line, tag); i >= 0 {
			level = l
			if j := strings.IndexByte(line[i:], ']'); j >= 0 {
				line = strings.TrimSpace(line[i+j+1:])
			}
			break
		}
	}
	w.logger.Log(context.Background(), level, line)
}

// hclogFor adapts slog to the hclog interface that raft and autopilot take.
func hclogFor(logger *slog.Logger, component string) hclog.Logger {
	level := hclog.Info
	if logger.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       component,
		Level:      level,
		Output:     newLogWriter(logger, component),
		TimeFormat: " ",
	})
}
