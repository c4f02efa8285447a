package testutil

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records instead of stopping.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestUntilReturnsOnceCondHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	took := Until(t, 5*time.Second, "third call", func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 || took <= 0 || took > 5*time.Second {
		t.Fatalf("Until returned after %d calls, took %s; want 3 calls within 5s", calls, took)
	}
}

func TestUntilFailsWithWhatAndLastError(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	n := 0
	Until(rec, 30*time.Millisecond, "the moon rises", func() error { n++; return fmt.Errorf("attempt %d", n) })
	want := fmt.Sprintf("the moon rises: not within 30ms: attempt %d", n)
	if n < 2 || rec.msg != want {
		t.Fatalf("after %d calls Fatalf got %q, want %q", n, rec.msg, want)
	}
}
