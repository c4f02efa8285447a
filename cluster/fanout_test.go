package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/fanout"
	"github.com/nodeup/nodeup/internal/testutil"
)

// On a real two-node cluster, both lists of targets name both nodes by
// name and RPC address, each node marking itself and only itself as self.
func TestAskNodesTargets(t *testing.T) {
	nodes := testCluster(t, 2, nil)
	for _, nd := range nodes {
		for _, list := range []struct {
			what    string
			targets func() []fanout.Target
		}{{"alive nodes", nd.aliveTargets}, {"live members", nd.liveMemberTargets}} {
			testutil.Until(t, 30*time.Second, fmt.Sprintf("%s of %s", list.what, nd.Name()), func() error {
				got := list.targets()
				var want []fanout.Target
				for _, o := range nodes {
					want = append(want, fanout.Target{Name: o.Name(), Addr: o.RPCAddr(), Self: o == nd})
				}
				less := func(a, b fanout.Target) int { return strings.Compare(a.Name, b.Name) }
				slices.SortFunc(got, less)
				if !slices.Equal(got, want) {
					return fmt.Errorf("targets %v; want %v", got, want)
				}
				return nil
			})
		}
	}
}
