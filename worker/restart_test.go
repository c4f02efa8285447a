package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
)

// restartAll kills every node (as kill -9 would: no leave, data dirs kept)
// and starts each again on its data dir and RPC port, so every node comes
// back with the next incarnation while the Raft state remembers the last.
// The test's driver is shut down first and connected to the new node 0.
func restartAll(t *testing.T, nodes []*cluster.Node, cfgs []cluster.Config) []*cluster.Node {
	t.Helper()
	Shutdown()
	for _, nd := range nodes {
		nd.Kill()
	}
	addrs := make([]string, len(nodes))
	for i, nd := range nodes {
		addrs[i] = nd.RPCAddr()
	}
	out := make([]*cluster.Node, len(nodes))
	for i, nd := range nodes {
		cfg := cfgs[i]
		_, port, _ := net.SplitHostPort(addrs[i])
		cfg.Port, _ = strconv.Atoi(port)
		cfg.Head, cfg.Join = i == 0, nil // the first finds no peer up yet
		for j, a := range addrs {
			if j != i {
				cfg.Join = append(cfg.Join, a)
			}
		}
		again, err := cluster.Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("restart %s: %v", nd.Name(), err)
		}
		if again.Incarnation() != nd.Incarnation()+1 {
			t.Fatalf("%s restarted at incarnation %d, want %d", nd.Name(), again.Incarnation(), nd.Incarnation()+1)
		}
		t.Cleanup(again.Kill)
		out[i] = again
	}
	if err := Init(context.Background(), Address(out[0].SocketAddr()), Logger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	return out
}

// A detached actor that may restart forever comes back after every node of
// the cluster was killed and restarted: the nodes' new incarnations tell the
// leader that the actor's worker process is gone, although each node is
// alive again before anything marks it dead. Once its node is registered
// in the new incarnation the actor is never ALIVE in its dead process, and a
// call reaches the restarted actor.
func TestDetachedActorRestartsAfterFullClusterKill(t *testing.T) {
	cfgs := make([]cluster.Config, 3)
	nodes := startClusterInit(t, 3, func(i int, cfg *cluster.Config) { cfgs[i] = *cfg })
	ctx := ctxT(t)
	h, err := Must(logActorClass.Options(Resources(map[string]float64{"node1": 1}), Detached(), MaxRestarts(-1))).Remote(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := pidCall.Remote(ctx, h).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := actorState(t, ctx, h.ID())
	if before.State != "ALIVE" || before.PID != pid || before.NodeName != "n1" {
		t.Fatalf("before the restart: %+v (actor says pid %d)", before, pid)
	}

	again := restartAll(t, nodes, cfgs)
	// Calls must reach the restarted actor within the bound, never hang.
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		entries, err := entriesCall.Remote(callCtx, h).Get(callCtx)
		if err == nil && (len(entries) != 1 || entries[0] != "v1") {
			err = fmt.Errorf("entries %v, want the constructor's fresh state [v1]", entries)
		}
		got <- err
	}()
	// While the call is pending, no server may show the actor alive in its
	// old process.
	testutil.Until(t, 40*time.Second, "a call to the actor after the full restart returns", func() error {
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("call after the full restart: %v", err)
			}
			return nil
		default:
		}
		checkNotAliveInOldProcess(t, again, nodes[1], h.ID(), pid)
		return errors.New("call pending")
	})
	info := actorState(t, ctx, h.ID())
	if info.State != "ALIVE" || info.PID == pid || info.Restarts != 1 {
		t.Fatalf("after the full restart: %+v; want ALIVE in a new process after 1 restart", info)
	}
}

// checkNotAliveInOldProcess fails the test when a server's state shows
// node old registered in its next incarnation and, read after that, actor
// id still ALIVE in process pid (the one that died with the node).
func checkNotAliveInOldProcess(t *testing.T, nodes []*cluster.Node, old *cluster.Node, id string, pid int) {
	t.Helper()
	for _, nd := range nodes {
		if !nd.IsLeader() {
			continue
		}
		st := nd.State()
		rec, err := st.NodeByID(old.ID())
		if err != nil || rec == nil || rec.Incarnation <= old.Incarnation() {
			return
		}
		a, err := st.ActorByID(id)
		if err == nil && a != nil && a.State == "ALIVE" && a.PID == pid {
			t.Fatalf("actor %s is ALIVE in its killed process (pid %d) after node %s registered in incarnation %d", id, pid, old.Name(), rec.Incarnation)
		}
	}
}
