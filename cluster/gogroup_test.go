package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
)

// stop waits for goroutines that return when their context ends, names
// those that do not within the bound, and starts nothing afterwards.
func TestGoGroupStop(t *testing.T) {
	g := newGoGroup(context.Background(), testutil.Logger())
	release := make(chan struct{})
	g.goCtx("polite", func(ctx context.Context) { <-ctx.Done() })
	g.goFunc("stubborn", func() { <-release })
	if got := g.names(); !slices.Equal(got, []string{"polite", "stubborn"}) {
		t.Fatalf("running %v", got)
	}
	if left := g.stop(50 * time.Millisecond); !slices.Equal(left, []string{"stubborn"}) {
		t.Fatalf("still running after stop: %v, want [stubborn]", left)
	}
	if g.goFunc("late", func() {}) {
		t.Fatal("a stopped group started a goroutine")
	}
	close(release)
	if left := g.stop(5 * time.Second); left != nil {
		t.Fatalf("still running after release: %v", left)
	}
}
