package worker

import (
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// shutdownSignals are the signals on which a driver shuts down (Ctrl-C,
// and what kill, systemd and container runtimes send).
var shutdownSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// HandleSignals turns the driver's signal handler on (the default) or off.
// With it on, Init arranges that SIGINT or SIGTERM runs Shutdown (the job
// ends cleanly: its actors, tasks, placement groups, objects and workers
// go) and then re-raises the signal, so the program still dies of it, with
// the exit status a shell shows as 130 or 143. A second signal during
// Shutdown kills the program at once. A signal the program ignores at Init
// (nohup) stays ignored. Pass HandleSignals(false) when the program handles
// SIGINT or SIGTERM itself (signal.Notify) and must keep its job past them;
// the re-raised signal then reaches its handler, but the job has ended. As
// Ray's driver, which turns SIGINT into KeyboardInterrupt and shuts down at
// exit. Either way, a driver that dies (kill -9, a crash) ends its job
// within seconds: its node watches its process.
func HandleSignals(on bool) InitOption {
	return func(c *initConfig) { c.noSignals = !on }
}

// handleSignals runs Shutdown on the first of shutdownSignals the program
// does not ignore, then re-raises it. The returned stop uninstalls the
// handler; it is idempotent.
func handleSignals(logger *slog.Logger) (stop func()) {
	var sigs []os.Signal
	for _, s := range shutdownSignals {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) == 0 {
		return func() {}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
		})
	}
	go func() {
		select {
		case s := <-ch:
			logger.Info("nodeup: shutting down on signal (a second one kills the program at once)", "signal", s.String())
			// Uninstalled first, so a second signal during Shutdown gets
			// the default action, and the re-raise below reaches only the
			// program's own handlers, if any.
			stop()
			Shutdown()
			reraise(s)
		case <-done:
		}
	}()
	return stop
}

// reraise sends s to this process again: with no handler left, the Go
// runtime's default action ends the program by s.
func reraise(s os.Signal) {
	if sig, ok := s.(syscall.Signal); ok {
		_ = syscall.Kill(os.Getpid(), sig)
	}
}
