package cluster

import (
	"context"
	"log/slog"
	"maps"
)

// uniqueKeys is a slog.Handler that keeps a record's keys apart from the
// logger's own: the node's logger carries "node" and "node_id" (this node),
// and a record's "node" (another node: a member that joined, a peer
// called) becomes "peer_node", so a JSON line never holds a key twice.
type uniqueKeys struct {
	h    slog.Handler
	keys map[string]bool // keys of WithAttrs at the top level; never written after creation
}

func newUniqueKeys(h slog.Handler) *uniqueKeys { return &uniqueKeys{h: h} }

// Enabled implements slog.Handler.
func (u *uniqueKeys) Enabled(ctx context.Context, l slog.Level) bool { return u.h.Enabled(ctx, l) }

// WithAttrs implements slog.Handler.
func (u *uniqueKeys) WithAttrs(as []slog.Attr) slog.Handler {
	keys := maps.Clone(u.keys)
	if keys == nil {
		keys = map[string]bool{}
	}
	for _, a := range as {
		keys[a.Key] = true
	}
	return &uniqueKeys{h: u.h.WithAttrs(as), keys: keys}
}

// WithGroup implements slog.Handler: later keys are inside the group, so
// none clashes with the top-level ones.
func (u *uniqueKeys) WithGroup(name string) slog.Handler {
	return &uniqueKeys{h: u.h.WithGroup(name)}
}

// Handle implements slog.Handler.
func (u *uniqueKeys) Handle(ctx context.Context, r slog.Record) error {
	clash := false
	r.Attrs(func(a slog.Attr) bool {
		clash = u.keys[a.Key]
		return !clash
	})
	if !clash {
		return u.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		for u.keys[a.Key] {
			a.Key = "peer_" + a.Key
		}
		out.AddAttrs(a)
		return true
	})
	return u.h.Handle(ctx, out)
}
