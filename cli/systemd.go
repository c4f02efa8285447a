package cli

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// readiness is what systemd notifications need of a node; *cluster.Node
// has it (Registered, Alive in cluster/notify.go).
type readiness interface {
	Registered() <-chan struct{}
	Alive() error
}

// notifySystemd speaks sd_notify for a node run by systemd (dist/nodeup.service,
// Type=notify): READY=1 once node is registered with the leader, WATCHDOG=1
// every half of WATCHDOG_USEC while node.Alive() is nil (skipped pings are
// logged; systemd restarts the node after WatchdogSec without one). Without
// NOTIFY_SOCKET every send is a no-op, so it is always safe to call. The
// returned stop sends STOPPING=1 and ends the pings; call it once the
// graceful stop begins.
func notifySystemd(ctx context.Context, node readiness, logger *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-node.Registered():
			if ok, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
				logger.Warn("systemd: cannot send READY=1", "err", err)
			} else if ok {
				logger.Info("systemd: READY=1 sent (registered with the leader)")
			}
		case <-ctx.Done():
		}
	}()
	if every, err := daemon.SdWatchdogEnabled(false); err != nil {
		logger.Warn("systemd watchdog: bad WATCHDOG_USEC or WATCHDOG_PID; no watchdog pings", "err", err)
	} else if every > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchdogPings(ctx, node, every/2, logger)
		}()
	}
	return func() {
		cancel()
		wg.Wait()
		_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	}
}

// watchdogPings sends WATCHDOG=1 at once and then every interval while
// node.Alive() is nil, as sd_watchdog_enabled(3) advises (half the timeout).
func watchdogPings(ctx context.Context, node readiness, every time.Duration, logger *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := node.Alive(); err != nil {
			logger.Warn("systemd watchdog: ping skipped, the node is not alive", "err", err)
		} else if _, err := daemon.SdNotify(false, daemon.SdNotifyWatchdog); err != nil {
			logger.Warn("systemd watchdog: cannot send WATCHDOG=1", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
