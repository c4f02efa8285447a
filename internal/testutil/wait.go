package testutil

import (
	"testing"
	"time"
)

// pollMax caps Until's backoff: the first polls come within milliseconds,
// later ones every 50 ms, so a slow condition (an RPC, a child process) is
// not asked more often than that.
const pollMax = 50 * time.Millisecond

// Until calls cond until it returns nil and returns how long that took. If
// within (a wall-clock duration) passes first, it fails t with what, the
// duration and cond's last error. Between calls it waits 1 ms, doubling up
// to 50 ms. It is the one polling loop of nodeup's tests.
func Until(t testing.TB, within time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) >= within {
			t.Fatalf("%s: not within %s: %v", what, within, err)
			return 0
		}
		time.Sleep(pause)
		pause = min(2*pause, pollMax)
	}
}
