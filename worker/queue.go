package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Errors of the non-blocking and timed Queue operations, as Ray's
// queue.Full and queue.Empty exceptions.
var (
	ErrQueueFull  = errors.New("queue is full")
	ErrQueueEmpty = errors.New("queue is empty")
)

// queueChunk bounds one blocking call to the queue actor, so a caller that
// gives up (ctx ends) never leaves a call behind that could take an item
// nobody receives.
const queueChunk = time.Second

// queueActor holds a Queue's items (msgpack values) in FIFO order. It runs
// with high MaxConcurrency: blocked Puts and Gets are goroutines waiting on
// changed, not CPU.
type queueActor struct {
	mu      sync.Mutex
	items   [][]byte
	maxsize int
	changed chan struct{} // closed and replaced on every change
}

type queueItem struct {
	Item []byte
	OK   bool
}

func newQueueActor(ctx context.Context, maxsize int) (*queueActor, error) {
	return &queueActor{maxsize: maxsize, changed: make(chan struct{})}, nil
}

// wait runs try until it succeeds or timeout passes.
func (q *queueActor) wait(ctx context.Context, timeout time.Duration, try func() bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		q.mu.Lock()
		ok := try()
		ch := q.changed
		if ok {
			close(q.changed)
			q.changed = make(chan struct{})
		}
		q.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (q *queueActor) Put(ctx context.Context, item []byte, timeoutMillis int64) (bool, error) {
	return q.wait(ctx, time.Duration(timeoutMillis)*time.Millisecond, func() bool {
		if q.maxsize > 0 && len(q.items) >= q.maxsize {
			return false
		}
		q.items = append(q.items, item)
		return true
	}), nil
}

func (q *queueActor) Get(ctx context.Context, timeoutMillis int64) (queueItem, error) {
	var out queueItem
	q.wait(ctx, time.Duration(timeoutMillis)*time.Millisecond, func() bool {
		if len(q.items) == 0 {
			return false
		}
		out = queueItem{Item: q.items[0], OK: true}
		q.items[0] = nil
		q.items = q.items[1:]
		return true
	})
	return out, nil
}

func (q *queueActor) Size(ctx context.Context) ([2]int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return [2]int{len(q.items), q.maxsize}, nil
}

var (
	queueClass = RegisterActor1(newQueueActor)
	queuePut   = RegisterMethod2((*queueActor).Put)
	queueGet   = RegisterMethod1((*queueActor).Get)
	queueSize  = RegisterMethod0((*queueActor).Size)
)

// Queue is a distributed FIFO queue of T backed by an actor (Ray's
// ray.util.queue.Queue). Any task, actor or driver may use it; pass it as an
// argument (it travels as its actor's handle).
type Queue[T any] struct {
	h ActorHandle[queueActor]
}

// NewQueue creates a queue holding at most maxsize items (0 or less:
// unbounded). opts are actor options for the queue's actor (e.g. Name,
// Detached, Resources).
func NewQueue[T any](ctx context.Context, maxsize int, opts ...Option) (Queue[T], error) {
	opts = append([]Option{MaxConcurrency(1 << 16)}, opts...)
	c, err := queueClass.Options(opts...)
	if err != nil {
		return Queue[T]{}, fmt.Errorf("new queue: %w", err)
	}
	h, err := c.Remote(ctx, maxsize)
	return Queue[T]{h: h}, err
}

// Actor returns the queue's actor handle (for Kill or listings).
func (q Queue[T]) Actor() ActorHandle[queueActor] { return q.h }

// EncodeMsgpack writes the queue as its actor handle.
func (q Queue[T]) EncodeMsgpack(enc *msgpack.Encoder) error { return q.h.EncodeMsgpack(enc) }

// DecodeMsgpack reads what EncodeMsgpack wrote.
func (q *Queue[T]) DecodeMsgpack(dec *msgpack.Decoder) error { return q.h.DecodeMsgpack(dec) }

// Put adds item, waiting for room as long as ctx allows (ctx's error if it
// ends first).
func (q Queue[T]) Put(ctx context.Context, item T) error { return q.put(ctx, item, -1) }

// PutTimeout adds item, waiting up to timeout for room; ErrQueueFull after.
func (q Queue[T]) PutTimeout(ctx context.Context, item T, timeout time.Duration) error {
	return q.put(ctx, item, timeout)
}

// PutNowait adds item if there is room now, else returns ErrQueueFull.
func (q Queue[T]) PutNowait(ctx context.Context, item T) error { return q.put(ctx, item, 0) }

func (q Queue[T]) put(ctx context.Context, item T, timeout time.Duration) error {
	b, err := msgpack.Marshal(item)
	if err != nil {
		return fmt.Errorf("queue put %T: %w", item, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		chunk := queueChunk
		if timeout >= 0 {
			chunk = min(chunk, max(time.Until(deadline), 0))
		}
		ok, err := queuePut.Remote(context.WithoutCancel(ctx), q.h, b, chunk.Milliseconds()).Get(context.WithoutCancel(ctx))
		switch {
		case err != nil:
			return fmt.Errorf("queue put: %w", err)
		case ok:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case timeout >= 0 && !time.Now().Before(deadline):
			return ErrQueueFull
		}
	}
}

// Get removes and returns the oldest item, waiting for one as long as ctx
// allows.
func (q Queue[T]) Get(ctx context.Context) (T, error) { return q.get(ctx, -1) }

// GetTimeout waits up to timeout for an item; ErrQueueEmpty after.
func (q Queue[T]) GetTimeout(ctx context.Context, timeout time.Duration) (T, error) {
	return q.get(ctx, timeout)
}

// GetNowait returns the oldest item if there is one, else ErrQueueEmpty.
func (q Queue[T]) GetNowait(ctx context.Context) (T, error) { return q.get(ctx, 0) }

func (q Queue[T]) get(ctx context.Context, timeout time.Duration) (T, error) {
	var zero T
	deadline := time.Now().Add(timeout)
	for {
		chunk := queueChunk
		if timeout >= 0 {
			chunk = min(chunk, max(time.Until(deadline), 0))
		}
		// The call itself is not cancelled with ctx: an item it takes is
		// returned rather than dropped.
		it, err := queueGet.Remote(context.WithoutCancel(ctx), q.h, chunk.Milliseconds()).Get(context.WithoutCancel(ctx))
		switch {
		case err != nil:
			return zero, fmt.Errorf("queue get: %w", err)
		case it.OK:
			var v T
			if err := msgpack.Unmarshal(it.Item, &v); err != nil {
				return zero, fmt.Errorf("queue get: decode item as %T: %w", v, err)
			}
			return v, nil
		case ctx.Err() != nil:
			return zero, ctx.Err()
		case timeout >= 0 && !time.Now().Before(deadline):
			return zero, ErrQueueEmpty
		}
	}
}

// Size returns the number of items in the queue.
func (q Queue[T]) Size(ctx context.Context) (int, error) {
	s, err := queueSize.Remote(ctx, q.h).Get(ctx)
	return s[0], err
}

// Empty reports whether the queue holds no items.
func (q Queue[T]) Empty(ctx context.Context) (bool, error) {
	s, err := queueSize.Remote(ctx, q.h).Get(ctx)
	return s[0] == 0, err
}

// Full reports whether the queue holds maxsize items (never, if unbounded).
func (q Queue[T]) Full(ctx context.Context) (bool, error) {
	s, err := queueSize.Remote(ctx, q.h).Get(ctx)
	return s[1] > 0 && s[0] >= s[1], err
}

// Shutdown ends the queue's actor; its items are gone.
func (q Queue[T]) Shutdown(ctx context.Context) error { return Kill(ctx, q.h, true) }
