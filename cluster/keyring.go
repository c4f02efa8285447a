package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// maxGossipKeys bounds a keyring sent by a peer.
const maxGossipKeys = 16

func (n *Node) keyringEndpoints() {
	handleLeader(n, wire.MethodKeyringRotate, n.keyringRotate)
	rpc.Handle(n.rpcServer, wire.MethodKeyringSet, n.keyringSet)
}

// keyringSet makes the node's gossip keyring exactly req's, in memberlist
// and in tls/gossip.keyring.
func (n *Node) keyringSet(ctx context.Context, req *wire.KeyringSetRequest) (*wire.Empty, error) {
	if n.sec.insecure {
		return nil, errInsecure("keyring")
	}
	if len(req.Keys) == 0 || len(req.Keys) > maxGossipKeys || req.Primary < 0 || req.Primary >= len(req.Keys) {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("keyring of %d keys, primary %d: want 1 to %d keys and a primary among them", len(req.Keys), req.Primary, maxGossipKeys)}
	}
	for i, k := range req.Keys {
		if len(k) != gossipKeyLen {
			return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("gossip key %d: %d bytes, want %d", i, len(k), gossipKeyLen)}
		}
	}
	n.keyringMu.Lock()
	defer n.keyringMu.Unlock()
	kr := n.keyring
	if kr == nil {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: "keyring: this node's gossip has not started"}
	}
	for _, k := range req.Keys {
		if err := kr.AddKey(k); err != nil {
			return nil, err
		}
	}
	primary := req.Keys[req.Primary]
	if err := kr.UseKey(primary); err != nil {
		return nil, err
	}
	for _, k := range kr.GetKeys() {
		if !slices.ContainsFunc(req.Keys, func(w []byte) bool { return bytes.Equal(w, k) }) {
			if err := kr.RemoveKey(k); err != nil {
				return nil, err
			}
		}
	}
	keys := append([][]byte{primary}, slices.DeleteFunc(slices.Clone(req.Keys), func(k []byte) bool { return bytes.Equal(k, primary) })...)
	if err := writeFileMode(n.dir.file(gossipKeyringFile), formatKeyring(keys), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", gossipKeyringFile, err)
	}
	n.sec.setGossip(keys)
	return &wire.Empty{}, nil
}

// keyringRotate installs a new gossip key on every live node, then makes
// it the primary everywhere, then removes the old keys: three rounds, each
// finished on every node before the next, so no two live nodes ever lack
// a common key (as `consul keyring -install/-use/-remove`). A node that
// fails the first round stops the rotation before anything changes.
func (n *Node) keyringRotate(ctx context.Context, _ *wire.Empty) (*wire.KeyringRotateResponse, error) {
	if n.sec.insecure {
		return nil, errInsecure("keyring rotate")
	}
	n.rotateMu.Lock()
	defer n.rotateMu.Unlock()
	nodes, err := n.fsm.State().Nodes()
	if err != nil {
		return nil, err
	}
	var live []*wire.Node
	for _, nd := range nodes {
		if nd.Status.Live() {
			live = append(live, nd)
		}
	}
	old := n.sec.gossipKeys()
	key := make([]byte, gossipKeyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	rounds := []struct {
		what string
		req  wire.KeyringSetRequest
	}{
		{"install", wire.KeyringSetRequest{Keys: append(slices.Clone(old), key), Primary: 0}},
		{"use", wire.KeyringSetRequest{Keys: append(slices.Clone(old), key), Primary: len(old)}},
		{"remove the old keys", wire.KeyringSetRequest{Keys: [][]byte{key}}},
	}
	for _, r := range rounds {
		if err := n.keyringRound(ctx, live, &r.req); err != nil {
			return nil, fmt.Errorf("keyring rotate: %s: %w", r.what, err)
		}
	}
	resp := &wire.KeyringRotateResponse{}
	for _, nd := range live {
		resp.Nodes = append(resp.Nodes, nd.Name)
	}
	n.logger.Info("rotated the gossip key", "nodes", len(live))
	return resp, nil
}

// keyringRound sets req on every node at once; the errors of those that
// failed, named.
func (n *Node) keyringRound(ctx context.Context, nodes []*wire.Node, req *wire.KeyringSetRequest) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var err error
			if nd.ID == n.id.NodeID {
				_, err = n.keyringSet(cctx, req)
			} else {
				err = n.pool.Call(cctx, nd.Address, wire.MethodKeyringSet, req, &wire.Empty{})
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("node %s (%s): %w", nd.Name, nd.Address, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d nodes failed: %v", len(errs), len(nodes), errs)
	}
	return nil
}
