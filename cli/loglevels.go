package cli

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
)

// logComponents are the values of the "component" attribute the node's
// loggers carry, each of which may have its own level.
var logComponents = []string{"autopilot", "fsm", "gossip", "gpu", "raft", "rpc"}

// logLevels holds the process's log levels: a base level for every record
// and, per component, one that overrides it for the records of loggers
// carrying that component (as Nomad's and Consul's per-subsystem levels).
// A SIGHUP swaps them all at once.
type logLevels struct {
	mu     sync.RWMutex
	base   slog.Level
	byComp map[string]slog.Level
}

// procLevels are the levels of the process's slog handler (setupLogging);
// a node's SIGHUP changes them (reloadLogLevel).
var procLevels = &logLevels{}

func (l *logLevels) set(base slog.Level, byComp map[string]slog.Level) {
	l.mu.Lock()
	l.base, l.byComp = base, byComp
	l.mu.Unlock()
}

// of is the level records of component pass at ("" for none).
func (l *logLevels) of(component string) slog.Level {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if lv, ok := l.byComp[component]; ok {
		return lv
	}
	return l.base
}

// String is the levels as parseLogLevels reads them: "info,raft=warn".
func (l *logLevels) String() string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	parts := []string{strings.ToLower(l.base.String())}
	comps := make([]string, 0, len(l.byComp))
	for c := range l.byComp {
		comps = append(comps, c)
	}
	sort.Strings(comps)
	for _, c := range comps {
		parts = append(parts, c+"="+strings.ToLower(l.byComp[c].String()))
	}
	return strings.Join(parts, ",")
}

// parseLogLevels reads "LEVEL[,COMPONENT=LEVEL...]", LEVEL one of debug,
// info, warn and error and COMPONENT one of logComponents: "info",
// "info,raft=warn,gossip=error", or only overrides ("raft=debug", base
// info). The error names the bad part and what is accepted.
func parseLogLevels(spec string) (slog.Level, map[string]slog.Level, error) {
	base, byComp, baseSet := slog.LevelInfo, map[string]slog.Level{}, false
	if strings.TrimSpace(spec) == "" {
		return base, nil, fmt.Errorf("log level %q: want a level (debug, info, warn or error), optionally followed by ,component=level (components: %s)", spec, strings.Join(logComponents, ", "))
	}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		comp, level, isComp := strings.Cut(part, "=")
		if !isComp {
			level = part
		}
		var lv slog.Level
		if err := lv.UnmarshalText([]byte(level)); err != nil || strings.ContainsAny(level, "+-") {
			return base, nil, fmt.Errorf("log level %q: %q is not a level: use debug, info, warn or error", spec, level)
		}
		switch {
		case !isComp && baseSet:
			return base, nil, fmt.Errorf("log level %q: two base levels; give one, then component=level pairs", spec)
		case !isComp:
			base, baseSet = lv, true
		case !slices.Contains(logComponents, comp):
			return base, nil, fmt.Errorf("log level %q: unknown component %q: use one of %s", spec, comp, strings.Join(logComponents, ", "))
		default:
			byComp[comp] = lv
		}
	}
	return base, byComp, nil
}

// levelHandler filters records by procLevels before inner sees them,
// using the component the logger was made With.
type levelHandler struct {
	inner     slog.Handler
	levels    *logLevels
	component string
}

// Enabled implements slog.Handler.
func (h *levelHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.levels.of(h.component)
}

// Handle implements slog.Handler.
func (h *levelHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.inner.Handle(ctx, r)
}

// WithAttrs implements slog.Handler, noting a "component" attribute.
func (h *levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	comp := h.component
	for _, a := range as {
		if a.Key == "component" {
			comp = a.Value.String()
		}
	}
	return &levelHandler{inner: h.inner.WithAttrs(as), levels: h.levels, component: comp}
}

// WithGroup implements slog.Handler.
func (h *levelHandler) WithGroup(name string) slog.Handler {
	return &levelHandler{inner: h.inner.WithGroup(name), levels: h.levels, component: h.component}
}
