package cluster

import (
	"context"
	"time"
)

// retrier is how the leader retries pending work (actors waiting for a
// node, placement groups waiting for resources): one pass over all of it at
// once, then every interval and at once after wake, until the term ends.
type retrier struct {
	kick chan struct{}
}

func newRetrier() retrier {
	return retrier{kick: make(chan struct{}, 1)}
}

// wake asks for a pass soon; wakes while one is due merge into it.
func (r retrier) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run calls pass(ctx) at once, then every interval and after each wake,
// until ctx ends.
func (r retrier) run(ctx context.Context, every time.Duration, pass func(ctx context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		}
	}
}
