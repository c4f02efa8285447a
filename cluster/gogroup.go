package cluster

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// goGroup tracks named goroutines that share one context: stop cancels it
// and waits for them, so nothing started through the group outlives its
// owner (the node, or one term of leadership). Once stopped, the group
// starts nothing more.
type goGroup struct {
	ctx    context.Context
	cancel context.CancelFunc
	logger *slog.Logger

	mu      sync.Mutex
	stopped bool
	running map[string]int // name -> goroutines of that name still running
	wg      sync.WaitGroup
}

func newGoGroup(parent context.Context, logger *slog.Logger) *goGroup {
	g := &goGroup{logger: logger, running: map[string]int{}}
	g.ctx, g.cancel = context.WithCancel(parent)
	return g
}

// goCtx runs f(ctx) in a goroutine counted under name, ctx ending when the
// group stops; false (f not run) once the group is stopped.
func (g *goGroup) goCtx(name string, f func(ctx context.Context)) bool {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return false
	}
	g.running[name]++
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.done(name)
		f(g.ctx)
	}()
	return true
}

// goFunc is goCtx for a function that watches its context elsewhere.
func (g *goGroup) goFunc(name string, f func()) bool {
	return g.goCtx(name, func(context.Context) { f() })
}

func (g *goGroup) done(name string) {
	g.mu.Lock()
	if g.running[name]--; g.running[name] <= 0 {
		delete(g.running, name)
	}
	g.mu.Unlock()
	g.wg.Done()
}

// stop cancels the group's context and waits up to bound for its
// goroutines to return; it returns (and logs) the names of those still
// running then, sorted. Safe to call more than once.
func (g *goGroup) stop(bound time.Duration) []string {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.cancel()
	exited := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(exited)
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
	}
	left := g.names()
	g.logger.Warn("goroutines still running after stop", "bound", bound, "names", left)
	return left
}

// names returns the names of the goroutines running now, sorted, a name
// once per goroutine.
func (g *goGroup) names() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for name, c := range g.running {
		for i := 0; i < c; i++ {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
