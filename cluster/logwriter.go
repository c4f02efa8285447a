package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
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

// hclogFor adapts slog to the hclog interface that raft and autopilot take:
// each call becomes one slog record of the same level, its key/value pairs
// slog attributes (not text in the message), with a "component" attribute.
// Levels are checked against logger at each call, so a SIGHUP's new level
// reaches Raft too.
func hclogFor(logger *slog.Logger, component string) hclog.Logger {
	return &slogHCLog{logger: logger.With("component", component), component: component, name: component}
}

// slogHCLog is an hclog.Logger writing to a *slog.Logger.
type slogHCLog struct {
	logger    *slog.Logger // component and With's args included
	component string
	name      string
	implied   []any
}

var _ hclog.Logger = (*slogHCLog)(nil)

// slogLevel maps hclog's levels onto slog's (Trace below Debug).
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// attrs turns hclog's alternating key/value args into slog attributes: a
// key that is not a string is printed, "node" and "node_id" (the node's
// logger has its own) become "<component>_node" and "<component>_node_id",
// an hclog.Format value is formatted, a fmt.Stringer (Raft's server
// state) printed, and a value without a key kept as EXTRA_VALUE_AT_END (as
// hclog does).
func attrs(component string, args []any) []slog.Attr {
	out := make([]slog.Attr, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			out = append(out, slog.Any("EXTRA_VALUE_AT_END", args[i]))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		if key == "node" || key == "node_id" {
			key = component + "_" + key
		}
		switch v := args[i+1].(type) {
		case hclog.Format:
			if len(v) > 0 {
				if format, ok := v[0].(string); ok {
					out = append(out, slog.String(key, fmt.Sprintf(format, v[1:]...)))
					continue
				}
			}
			out = append(out, slog.Any(key, v))
		case error, slog.LogValuer:
			out = append(out, slog.Any(key, v))
		case fmt.Stringer:
			out = append(out, slog.String(key, v.String()))
		default:
			out = append(out, slog.Any(key, v))
		}
	}
	return out
}

// Log implements hclog.Logger.
func (l *slogHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	ctx, lv := context.Background(), slogLevel(level)
	if !l.logger.Enabled(ctx, lv) {
		return
	}
	l.logger.LogAttrs(ctx, lv, msg, attrs(l.component, args)...)
}

// Trace implements hclog.Logger.
func (l *slogHCLog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }

// Debug implements hclog.Logger.
func (l *slogHCLog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }

// Info implements hclog.Logger.
func (l *slogHCLog) Info(msg string, args ...any) { l.Log(hclog.Info, msg, args...) }

// Warn implements hclog.Logger.
func (l *slogHCLog) Warn(msg string, args ...any) { l.Log(hclog.Warn, msg, args...) }

// Error implements hclog.Logger.
func (l *slogHCLog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *slogHCLog) enabled(level hclog.Level) bool {
	return l.logger.Enabled(context.Background(), slogLevel(level))
}

// IsTrace implements hclog.Logger.
func (l *slogHCLog) IsTrace() bool { return l.enabled(hclog.Trace) }

// IsDebug implements hclog.Logger.
func (l *slogHCLog) IsDebug() bool { return l.enabled(hclog.Debug) }

// IsInfo implements hclog.Logger.
func (l *slogHCLog) IsInfo() bool { return l.enabled(hclog.Info) }

// IsWarn implements hclog.Logger.
func (l *slogHCLog) IsWarn() bool { return l.enabled(hclog.Warn) }

// IsError implements hclog.Logger.
func (l *slogHCLog) IsError() bool { return l.enabled(hclog.Error) }

// ImpliedArgs implements hclog.Logger.
func (l *slogHCLog) ImpliedArgs() []any { return l.implied }

// With implements hclog.Logger.
func (l *slogHCLog) With(args ...any) hclog.Logger {
	as := attrs(l.component, args)
	anyAttrs := make([]any, len(as))
	for i, a := range as {
		anyAttrs[i] = a
	}
	return &slogHCLog{logger: l.logger.With(anyAttrs...), component: l.component, name: l.name, implied: append(slices.Clip(l.implied), args...)}
}

// Name implements hclog.Logger.
func (l *slogHCLog) Name() string { return l.name }

// Named implements hclog.Logger: the name becomes a "subsystem" attribute
// (component stays the one hclogFor set).
func (l *slogHCLog) Named(name string) hclog.Logger {
	full := name
	if l.name != "" {
		full = l.name + "." + name
	}
	return &slogHCLog{logger: l.logger.With("subsystem", name), component: l.component, name: full, implied: l.implied}
}

// ResetNamed implements hclog.Logger.
func (l *slogHCLog) ResetNamed(name string) hclog.Logger {
	return &slogHCLog{logger: l.logger.With("subsystem", name), component: l.component, name: name, implied: l.implied}
}

// SetLevel implements hclog.Logger as a no-op: the slog handler's level
// (--log-level, SIGHUP) decides.
func (l *slogHCLog) SetLevel(hclog.Level) {}

// GetLevel implements hclog.Logger: the lowest level the handler passes.
func (l *slogHCLog) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(lv) {
			return lv
		}
	}
	return hclog.Off
}

// StandardLogger implements hclog.Logger.
func (l *slogHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter implements hclog.Logger: lines are parsed for a level tag
// as memberlist's are.
func (l *slogHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &logWriter{logger: l.logger}
}
