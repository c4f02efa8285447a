package cluster

import (
	"context"
	"errors"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// errNotYet wraps a lookup's not-found error for a record its creator may
// still be registering: actors and placement groups registered in the
// background under IDs their creators chose, whose IDs can reach another
// process before the registration commits.
type errNotYet struct{ err error }

func (e errNotYet) Error() string { return e.err.Error() }
func (e errNotYet) Unwrap() error { return e.err }

// longPoll answers a waiting lookup from the state store without polling:
// it runs look, and until look reports done it waits for a channel look
// added to ws to fire (the watched records' changes, through the store's
// ...Watch lookups, or any other wake-up look needs) at most waitMillis
// milliseconds in all; with waitMillis 0 it looks once. Writes to other
// records do not wake it. An errNotYet from look is waited through like
// "not done" and returned unwrapped when the wait ends; any other error is
// returned at once, and ctx's error when ctx ends. Reaching the deadline
// is not an error: the caller answers with the record as it last saw it.
func (n *Node) longPoll(ctx context.Context, waitMillis int64, look func(ws memdb.WatchSet) (done bool, err error)) error {
	wait := ctx
	if waitMillis > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, time.Duration(waitMillis)*time.Millisecond)
		defer cancel()
	}
	for {
		ws := memdb.NewWatchSet()
		done, err := look(ws)
		var notYet errNotYet
		pending := errors.As(err, &notYet)
		if err != nil && !pending {
			return err
		}
		if !done && waitMillis > 0 {
			if ws.WatchCtx(wait) == nil {
				continue // a watched record changed: look again
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if pending {
			return notYet.err
		}
		return nil
	}
}
