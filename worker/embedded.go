package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nodeup/nodeup/sched"
)

// ErrNoNode is returned by Init when there is no node to connect to: no
// Address option, no NODEUP_ADDRESS, no node started on this machine
// answering, and no embedded node linked into the program. The SDK does not
// link the node daemon by itself (it would make every program 19 MB); start
// a node (`nodeup start --head`), set NODEUP_ADDRESS=host:port, or import
// _ "github.com/nodeup/nodeup/embedded" to run one inside the program as
// ray.init() does.
var ErrNoNode = errors.New(`nodeup: no node to connect to: start one (nodeup start --head), ` +
	`set NODEUP_ADDRESS=host:port, or import _ "github.com/nodeup/nodeup/embedded" to run one in this program`)

// EmbeddedSpec is the single-node cluster Init asks an EmbeddedStarter for.
type EmbeddedSpec struct {
	// Resources are EmbeddedResources as given (fixed-point; nil when not
	// given); the starter fills in what is missing (CPU, memory).
	Resources sched.ResourceSet
	// DeclareGPUs replaces GPU detection with NumGPUs devices of GPUModel
	// (EmbeddedGPUs, NODEUP_NUM_GPUS, NODEUP_GPU_MODEL); false detects them.
	DeclareGPUs bool
	NumGPUs     int
	GPUModel    string
}

// EmbeddedStarter starts a node inside this process and returns its RPC
// address ("host:port") and a function that stops it and removes its files.
// Package embedded registers one; see RegisterEmbeddedStarter.
type EmbeddedStarter func(ctx context.Context, spec EmbeddedSpec) (addr string, stop func(), err error)

var (
	starterMu sync.Mutex
	starter   EmbeddedStarter
)

// RegisterEmbeddedStarter makes Init start nodes with s when it finds none
// to connect to. Package embedded calls it from its init function, so that
// importing it for its side effect is all a program does (as database/sql
// drivers register). A later registration replaces an earlier one.
func RegisterEmbeddedStarter(s EmbeddedStarter) {
	starterMu.Lock()
	starter = s
	starterMu.Unlock()
}

func registeredStarter() EmbeddedStarter {
	starterMu.Lock()
	defer starterMu.Unlock()
	return starter
}

// startEmbedded runs a one-node cluster inside this process through the
// registered starter (as ray.init() without an address starts one), and
// returns its address. Without a starter it returns ErrNoNode.
func (cw *coreWorker) startEmbedded(ctx context.Context, cfg initConfig) (string, error) {
	start := registeredStarter()
	if start == nil {
		return "", ErrNoNode
	}
	spec, err := cfg.embeddedSpec()
	if err != nil {
		return "", err
	}
	addr, stop, err := start(ctx, spec)
	if err != nil {
		return "", fmt.Errorf("nodeup: start embedded node: %w", err)
	}
	cw.stopEmbedded = stop
	return addr, nil
}

// embeddedSpec is what Init asks of an embedded node: its resources and
// GPUs (embeddedGPUs).
func (c initConfig) embeddedSpec() (EmbeddedSpec, error) {
	spec := EmbeddedSpec{Resources: c.resources}
	if err := c.embeddedGPUs(&spec); err != nil {
		return EmbeddedSpec{}, err
	}
	return spec, nil
}
