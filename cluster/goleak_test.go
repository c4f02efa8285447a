package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// A 3-node cluster started and stopped leaves no goroutine of its own
// behind: every one the nodes started was tracked and stopped.
func TestClusterStopLeavesNoGoroutines(t *testing.T) {
	// Goroutines that exist before the cluster (the test runner's, other
	// tests' leftovers) are not this cluster's.
	ignore := goleak.IgnoreCurrent()
	nodes := testCluster(t, 3, nil)
	waitFormed(t, nodes, 3, 3)
	for _, nd := range nodes {
		if err := nd.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	goleak.VerifyNone(t, ignore,
		// msgpack keeps, per decoded type, a process-wide goroutine that
		// fills a channel of fresh values (decode_typgen.go): a cache of
		// the library's, started by the first decode of a type.
		goleak.IgnoreTopFunction("github.com/vmihailenco/msgpack/v5.cachedValue.func1"),
		// memberlist's Shutdown does not wait for a probe already in
		// flight: it ends on its own ack timeout (make test caught one
		// still waiting under load). memberlist's own loops are still
		// checked, so a Memberlist never shut down is still found.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}
