// Package ratelog rate-limits the log lines that peers can trigger, so
// that a flood of bad connections cannot flood the log.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter lets one line through per interval and counts the others. The
// zero value is not usable; use New.
type Limiter struct {
	interval time.Duration

	mu         sync.Mutex
	next       time.Time
	suppressed int
}

// New returns a limiter passing one line per interval.
func New(interval time.Duration) *Limiter {
	return &Limiter{interval: interval}
}

// allow reports whether a line may be logged now and how many were
// suppressed since the last one that was.
func (l *Limiter) allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	l.next = now.Add(l.interval)
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// Warn logs msg with args on logger at warning level unless a line went
// through within the interval; a line that gets through after others
// were dropped carries their count as "suppressed".
func (l *Limiter) Warn(logger *slog.Logger, msg string, args ...any) {
	ok, suppressed := l.allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	logger.Warn(msg, args...)
}
