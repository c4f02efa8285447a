package cluster

import "sync"

// broadcast wakes every waiter at each publish: next returns a channel
// that the next publish closes.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// next returns the channel the next publish closes.
func (b *broadcast) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// publish wakes everyone waiting on next's channel.
func (b *broadcast) publish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
