package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/cluster"
)

// defaultRetryInterval is --retry-interval's default: shorter than Consul's
// 30 s, so a cluster whose machines boot together forms within seconds.
const defaultRetryInterval = 5 * time.Second

// retryFlags are start's and join's --retry-max and --retry-interval, as
// Consul's retry_max and retry_interval.
func retryFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.IntFlag{Name: "retry-max", Usage: "tries to reach a peer to join before giving up (0: keep trying until one answers, as Consul's retry_join)"},
		&ucli.DurationFlag{Name: "retry-interval", Value: defaultRetryInterval, Usage: "wait between tries to reach a peer to join"},
	}
}

// retryPolicy is how startWithRetry retries: Max tries in all (0: no
// limit), Interval apart.
type retryPolicy struct {
	Max      int
	Interval time.Duration
}

func retryPolicyOf(c *ucli.Context) (retryPolicy, error) {
	p := retryPolicy{Max: c.Int("retry-max"), Interval: c.Duration("retry-interval")}
	if p.Max < 0 {
		return p, fmt.Errorf("--retry-max %d: want 0 (no limit) or more tries", p.Max)
	}
	if p.Interval < 10*time.Millisecond {
		return p, fmt.Errorf("--retry-interval %s: want at least 10ms, e.g. 5s", p.Interval)
	}
	return p, nil
}

// startWithRetry starts a node, and while its start fails only because no
// peer to join answered (cluster.ErrNoPeerAnswered) and it is not a head,
// tries again every p.Interval, logging each failed try, until one
// answers, p.Max tries failed, or ctx ends. Any other error is returned
// at once: a refused token or a port in use does not go away by waiting.
func startWithRetry(ctx context.Context, cfg cluster.Config, p retryPolicy, logger *slog.Logger) (*cluster.Node, error) {
	for try := 1; ; try++ {
		n, err := cluster.Start(ctx, cfg)
		if err == nil {
			if try > 1 {
				logger.Info("join: a peer answered", "try", try)
			}
			return n, nil
		}
		if cfg.Head || !errors.Is(err, cluster.ErrNoPeerAnswered) {
			return nil, err
		}
		if p.Max > 0 && try >= p.Max {
			if try == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("no peer answered in %d tries (--retry-max %d): %w", try, p.Max, err)
		}
		logger.Warn("join: no peer answered; trying again", "try", try, "retry_max", p.Max, "retry_in", p.Interval, "peers", cfg.Join, "err", err)
		t := time.NewTimer(p.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("stopped while trying to join (%d tries): %w", try, err)
		case <-t.C:
		}
	}
}
