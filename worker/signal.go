package worker

import (
	"context"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// signalActor is Ray's SignalActor test pattern as a primitive: waiters
// block on ready until someone sends. Waiters are goroutines in the actor's
// process, and the tasks waiting on them are blocked in Get, which lends
// their CPU back: waiters occupy no CPU.
type signalActor struct {
	mu    sync.Mutex
	ready chan struct{} // closed while the signal is set
}

func newSignalActor(ctx context.Context) (*signalActor, error) {
	return &signalActor{ready: make(chan struct{})}, nil
}

func (s *signalActor) Send(ctx context.Context, clear bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.ready:
	default:
		close(s.ready) // wakes every waiter
	}
	if clear {
		s.ready = make(chan struct{})
	}
	return true, nil
}

func (s *signalActor) Wait(ctx context.Context) (bool, error) {
	s.mu.Lock()
	ch := s.ready
	s.mu.Unlock()
	select {
	case <-ch:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

var (
	signalClass = RegisterActor0(newSignalActor)
	signalSend  = RegisterMethod1((*signalActor).Send)
	signalWait  = RegisterMethod0((*signalActor).Wait)
)

// Signal lets tasks wait until someone sends (Ray's SignalActor pattern).
// Pass it to tasks as an argument; it travels as its actor's handle.
type Signal struct {
	h ActorHandle[signalActor]
}

// NewSignal creates an unset signal. opts are actor options for its actor.
func NewSignal(ctx context.Context, opts ...Option) (Signal, error) {
	opts = append([]Option{MaxConcurrency(1 << 16)}, opts...)
	c, err := signalClass.Options(opts...)
	if err != nil {
		return Signal{}, fmt.Errorf("new signal: %w", err)
	}
	h, err := c.Remote(ctx)
	return Signal{h: h}, err
}

// Actor returns the signal's actor handle.
func (s Signal) Actor() ActorHandle[signalActor] { return s.h }

// EncodeMsgpack writes the signal as its actor handle.
func (s Signal) EncodeMsgpack(enc *msgpack.Encoder) error { return s.h.EncodeMsgpack(enc) }

// DecodeMsgpack reads what EncodeMsgpack wrote.
func (s *Signal) DecodeMsgpack(dec *msgpack.Decoder) error { return s.h.DecodeMsgpack(dec) }

// Send wakes every current waiter. With clear the signal is unset again at
// once (later Waits block); without, it stays set (later Waits return).
func (s Signal) Send(ctx context.Context, clear bool) error {
	if _, err := signalSend.Remote(ctx, s.h, clear).Get(ctx); err != nil {
		return fmt.Errorf("signal send: %w", err)
	}
	return nil
}

// Wait blocks until the signal is sent (or ctx ends).
func (s Signal) Wait(ctx context.Context) error {
	if _, err := signalWait.Remote(ctx, s.h).Get(ctx); err != nil {
		return fmt.Errorf("signal wait: %w", err)
	}
	return nil
}
