// Command tpu_actor is seed 000's actor that needs two TPU-v3 units: a task
// asking for one TPU-v3 and a TPUModel actor asking for two, on a cluster
// where one node declares "TPU-v3": 2 (start it with --resources TPU-v3=2;
// with no cluster running, an embedded node declares it). It checks the
// actor ran on a node that offers TPU-v3 and that, while the actor holds
// both units, the cluster has none of them free.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

var trainOnTPU = worker.Register0(func(ctx context.Context) (string, error) {
	fmt.Println("Training on TPU-v3!")
	return worker.NodeName(), nil
})

// TPUModel is the seed's actor.
type TPUModel struct{ node string }

// NewTPUModel is its constructor.
func NewTPUModel(ctx context.Context) (*TPUModel, error) {
	fmt.Println("TPUModel initialized, using 2 TPU-v3 resources.")
	return &TPUModel{node: worker.NodeName()}, nil
}

// Predict says where it ran.
func (m *TPUModel) Predict(ctx context.Context, data []float64) (string, error) {
	fmt.Println("Predicting using TPU-v3...")
	return m.node, nil
}

var (
	tpuModel = worker.RegisterActor0(NewTPUModel)
	predict  = worker.RegisterMethod1((*TPUModel).Predict)
)

func main() {
	ctx := context.Background()
	if err := worker.Init(ctx, worker.EmbeddedResources(map[string]float64{"CPU": 4, "TPU-v3": 2})); err != nil {
		log.Fatal(err)
	}
	defer worker.Shutdown()
	tpuNodes := map[string]bool{}
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		fail("%v", err)
	}
	for _, n := range nodes {
		if n.Alive && n.Total["TPU-v3"] >= 2 {
			tpuNodes[n.NodeName] = true
		}
	}
	if len(tpuNodes) == 0 {
		fail("no node offers TPU-v3=2: start one with --resources TPU-v3=2")
	}
	taskNode, err := worker.Must(trainOnTPU.Options(worker.Resources(map[string]float64{"TPU-v3": 1}))).Remote(ctx).Get(ctx)
	if err != nil || !tpuNodes[taskNode] {
		fail("train_on_tpu ran on %q (%v), want a TPU-v3 node", taskNode, err)
	}
	model, err := worker.Must(tpuModel.Options(worker.Resources(map[string]float64{"TPU-v3": 2}))).Remote(ctx)
	if err != nil {
		fail("%v", err)
	}
	node, err := predict.Remote(ctx, model, []float64{1, 2, 3}).Get(ctx)
	if err != nil || !tpuNodes[node] {
		fail("TPUModel ran on %q (%v), want a TPU-v3 node", node, err)
	}
	fmt.Printf("TPUModel runs on %s\n", node)
	// The actor holds both units for its life: availability shows it once
	// the node has reported (heartbeats are sub-second).
	deadline := time.Now().Add(10 * time.Second)
	for {
		avail, err := worker.AvailableResources(ctx)
		if err != nil {
			fail("%v", err)
		}
		if avail["TPU-v3"] < 2*float64(len(tpuNodes)) {
			break
		}
		if time.Now().After(deadline) {
			fail("TPU-v3 available stayed %v while the actor holds 2", avail["TPU-v3"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("check: the TPU-v3 task and the 2-TPU actor ran on a TPU-v3 node; the actor holds its units")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "tpu_actor: "+format+"\n", args...)
	worker.Shutdown()
	os.Exit(1)
}
