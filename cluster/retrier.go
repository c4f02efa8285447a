package cluster

import (
	"context"
	"time"
)

// retrier runs a periodic pass that can also be asked for sooner: one pass
// at once, then every interval and at once after wake, until its context
// ends. The leader retries pending work with it (actors waiting for a node,
// placement groups waiting for resources) and reconciles the node table at
// gossip changes; a node rejoins failed members with it.
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
