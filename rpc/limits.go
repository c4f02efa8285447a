package rpc

import (
	"errors"
	"net"
	"time"
)

// Limits bound what one peer can make a Server hold: connections,
// goroutines, memory and time. Every byte a server reads is treated as
// hostile; see the package documentation for what it does with a frame
// that breaks these limits.
type Limits struct {
	// MaxConns is the most connections served at once; ServeConn closes
	// one beyond it at once, with a rate-limited warning.
	MaxConns int
	// MaxRequestSize is the largest request payload, in bytes (capped at
	// MaxFrameSize); a longer length prefix closes the connection before
	// anything is allocated for it.
	MaxRequestSize int
	// MaxPending is the most requests of one connection that run at once;
	// the server answers any more with an error of code CodeOverloaded,
	// skipping their bodies unread.
	MaxPending int
	// MaxPendingBytes is the most request body bytes, in bytes, that the
	// running requests of one connection may hold; a request that would
	// exceed it is refused as for MaxPending, unless it would run alone.
	MaxPendingBytes int
	// IdleTimeout closes a connection that starts no frame for this long
	// while none of its requests runs.
	IdleTimeout time.Duration
	// FrameTimeout is how long a frame may take to arrive from its first
	// byte, plus one second per minFrameRate (1 MiB) of payload; a peer
	// that is slower is closed (slowloris).
	FrameTimeout time.Duration
}

// DefaultLimits returns the limits a new Server has.
func DefaultLimits() Limits {
	return Limits{
		MaxConns:        4096,
		MaxRequestSize:  MaxFrameSize,
		MaxPending:      4096,
		MaxPendingBytes: 64 << 20,
		IdleTimeout:     5 * time.Minute,
		FrameTimeout:    30 * time.Second,
	}
}

// withDefaults returns l with each zero or negative field set to its
// default and MaxRequestSize capped at MaxFrameSize.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&l.MaxConns, d.MaxConns)
	pick(&l.MaxRequestSize, d.MaxRequestSize)
	pick(&l.MaxPending, d.MaxPending)
	pick(&l.MaxPendingBytes, d.MaxPendingBytes)
	l.MaxRequestSize = min(l.MaxRequestSize, MaxFrameSize)
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.FrameTimeout <= 0 {
		l.FrameTimeout = d.FrameTimeout
	}
	return l
}

// SetLimits replaces the server's limits (zero fields take their
// defaults). Connections accepted afterwards are served under them.
func (s *Server) SetLimits(l Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = l.withDefaults()
}

const (
	// readBufSize is a server connection's read buffer, in bytes: enough
	// for a burst of small requests, small enough that thousands of idle
	// connections cost little. Larger payloads bypass it.
	readBufSize = 4 << 10
	// minFrameRate is the slowest rate, in bytes per second, at which a
	// large frame may arrive once Limits.FrameTimeout is used up.
	minFrameRate = 1 << 20
	// warnInterval is the least time between two warnings that peers can
	// trigger (bad frames, refused connections); the rest are counted.
	warnInterval = time.Second
)

// ErrTooManyConns is logged when ServeConn refuses a connection beyond
// Limits.MaxConns.
var ErrTooManyConns = errors.New("rpc: too many connections")

// errIdle ends a connection that sent nothing for Limits.IdleTimeout.
var errIdle = errors.New("idle timeout")

// isTimeout reports whether err is a read deadline expiring.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// warn logs a warning a peer caused, at most one per warnInterval for
// the whole server; the line that gets through says how many were
// suppressed before it.
func (s *Server) warn(msg string, args ...any) {
	s.warnings.Warn(s.logger, msg, args...)
}
