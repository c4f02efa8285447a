package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
)

// TestReloadChangesCustomResourcesAndLabels: a running node's custom
// resources and labels change without a restart (a SIGHUP after the config
// file changed): the leader's node table shows them, work queued for a
// resource the node gains starts, and a change that would take a resource
// below what running work holds is refused whole.
func TestReloadChangesCustomResourcesAndLabels(t *testing.T) {
	nodes := testCluster(t, 2, func(i int, c *Config) {
		if i == 1 {
			c.Resources["fpga"] = sched.QuantityOf(2)
			c.Labels = map[string]string{"zone": "a"}
		}
	})
	waitFormed(t, nodes, 2, 2)
	n1 := nodes[1]
	held := n1.local.tryGrant(sched.ResourceSet{"fpga": sched.QuantityOf(2)})
	if held == nil {
		t.Fatal("could not lease fpga=2 on n1")
	}
	queued, w := n1.local.enqueue(sched.ResourceSet{"tpu": sched.QuantityOf(1)})
	if queued != nil {
		t.Fatal("a tpu lease was granted on a node without tpu")
	}

	_, err := n1.Reload(sched.ResourceSet{"fpga": sched.QuantityOf(1)}, map[string]string{"zone": "a"})
	if !errors.Is(err, ErrReloadInUse) || !strings.Contains(err.Error(), "fpga") {
		t.Fatalf("shrinking fpga below what a lease holds: %v, want ErrReloadInUse naming fpga", err)
	}
	if got := n1.local.totals()["fpga"]; got != sched.QuantityOf(2) {
		t.Fatalf("after a refused reload fpga is %s, want 2", got)
	}

	changes, err := n1.Reload(sched.ResourceSet{"fpga": sched.QuantityOf(4), "tpu": sched.QuantityOf(2)}, map[string]string{"zone": "b"})
	if err != nil || !strings.Contains(changes, "resource tpu: 0 → 2") || !strings.Contains(changes, "labels:") {
		t.Fatalf("reload: %q, %v", changes, err)
	}
	select {
	case l := <-w.grant:
		if l == nil {
			t.Fatal("the queued tpu lease was refused")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued tpu lease did not start after the node gained tpu")
	}
	if a := n1.local.available(); a["fpga"] != sched.QuantityOf(2) || a["tpu"] != sched.QuantityOf(1) {
		t.Fatalf("available after the reload: %s, want fpga=2 (4 less the 2 held), tpu=1", a)
	}
	testutil.Until(t, 20*time.Second, "the leader's node table shows n1's new resources and labels", func() error {
		nd, err := nodes[0].fsm.State().NodeByID(n1.ID())
		if err != nil || nd == nil {
			return fmt.Errorf("n1 in the node table: %v, %v", nd, err)
		}
		if nd.Resources["tpu"] != sched.QuantityOf(2) || nd.Resources["fpga"] != sched.QuantityOf(4) || nd.Labels["zone"] != "b" {
			return fmt.Errorf("n1's record: resources %s, labels %v", nd.Resources, nd.Labels)
		}
		return nil
	})
	if changes, err := n1.Reload(sched.ResourceSet{"fpga": sched.QuantityOf(4), "tpu": sched.QuantityOf(2)}, map[string]string{"zone": "b"}); err != nil || changes != "" {
		t.Fatalf("the same settings again: %q, %v; want no change", changes, err)
	}
	if _, err := n1.Reload(sched.ResourceSet{sched.CPU: sched.QuantityOf(8)}, nil); err == nil || !strings.Contains(err.Error(), "not a custom resource") {
		t.Fatalf("reloading CPU: %v", err)
	}
}
