package cluster

import (
	"context"
	"errors"
	"time"
)

// errNotYet wraps a lookup's not-found error for a record its creator may
// still be registering: actors and placement groups registered in the
// background under IDs their creators chose, whose IDs can reach another
// process before the registration commits.
type errNotYet struct{ err error }

func (e errNotYet) Error() string { return e.err.Error() }
func (e errNotYet) Unwrap() error { return e.err }

// longPoll answers a waiting lookup from the state store without polling:
// it runs look, and until look reports done it waits for the store's next
// change (or look's wake channel, nil for none) at most waitMillis
// milliseconds in all; with waitMillis 0 it looks once. An errNotYet from
// look is waited through like "not done" and returned unwrapped when the
// wait ends; any other error is returned at once. Reaching the deadline
// is not an error: the caller answers with the record as it last saw it.
func (n *Node) longPoll(ctx context.Context, waitMillis int64, look func() (done bool, wake <-chan struct{}, err error)) error {
	var deadline <-chan time.Time
	if waitMillis > 0 {
		t := time.NewTimer(time.Duration(waitMillis) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	st := n.fsm.State()
	for {
		watch := st.WatchCh()
		done, wake, err := look()
		var notYet errNotYet
		pending := errors.As(err, &notYet)
		switch {
		case err != nil && !pending:
			return err
		case done || deadline == nil:
			if pending {
				return notYet.err
			}
			return nil
		}
		select {
		case <-watch:
		case <-wake:
		case <-deadline:
			if pending {
				return notYet.err
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
