package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/internal/mpsafe"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// forwardTimeout bounds how long a request waits for a leader to exist.
const forwardTimeout = 15 * time.Second

// leaderAddr is the RPC address of the Raft leader as this node knows it.
func (n *Node) leaderAddr() string {
	if n.raft != nil {
		if addr, _ := n.raft.LeaderWithID(); addr != "" {
			return string(addr)
		}
	}
	return n.leaderHint.Load().(string)
}

// handleLeader registers method twice: the public name, which any node serves
// by running fn when it leads and forwarding otherwise, and method+"@leader",
// which only the leader serves.
func handleLeader[Req, Resp any](n *Node, method string, fn func(ctx context.Context, req *Req) (*Resp, error)) {
	handleAtLeader(n, method, fn)
	n.rpcServer.Register(method, func(ctx context.Context, body []byte) (any, error) {
		if n.IsLeader() {
			var req Req
			if err := mpsafe.Unmarshal(body, &req); err != nil {
				return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("decode %s request: %v", method, err)}
			}
			return fn(ctx, &req)
		}
		var out msgpack.RawMessage
		if err := n.forward(ctx, method, msgpack.RawMessage(body), &out); err != nil {
			return nil, err
		}
		return out, nil
	})
}

// handleAtLeader registers method+"@leader" (what forward calls), which
// runs fn on the leader and is refused with not_leader elsewhere.
func handleAtLeader[Req, Resp any](n *Node, method string, fn func(ctx context.Context, req *Req) (*Resp, error)) {
	rpc.Handle(n.rpcServer, method+wire.LeaderSuffix, func(ctx context.Context, req *Req) (*Resp, error) {
		if !n.IsLeader() {
			return nil, &rpc.Error{Code: wire.CodeNotLeader, Message: "this node is not the leader"}
		}
		return fn(ctx, req)
	})
}

// forward sends a leader-only call to the leader, waiting for one to be
// elected (up to forwardTimeout) and following leader changes. It is also how
// this node itself reaches leader-only methods.
func (n *Node) forward(ctx context.Context, method string, req, resp any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, forwardTimeout)
		defer cancel()
	}
	backoff := 20 * time.Millisecond
	var lastErr error
	for {
		addr := n.leaderAddr()
		if addr == "" {
			addr = n.askForLeader(ctx)
		}
		if addr != "" {
			err := n.pool.Call(ctx, addr, method+wire.LeaderSuffix, req, resp)
			var re *rpc.Error
			switch {
			case err == nil:
				return nil
			case errors.As(err, &re) && re.Code != wire.CodeNotLeader:
				return err // the leader answered: an application error
			}
			lastErr = err
			n.leaderHint.Store("")
		} else {
			lastErr = errors.New("no leader elected yet")
		}
		select {
		case <-ctx.Done():
			return &rpc.Error{Code: wire.CodeNoLeader, Message: fmt.Sprintf("%s: no cluster leader reachable (%v); is a quorum of Raft voters up?", method, lastErr)}
		case <-n.ctx.Done():
			return rpc.ErrClosed
		case <-time.After(backoff):
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

// askForLeader asks live server members who leads; non-voters use it.
func (n *Node) askForLeader(ctx context.Context) string {
	if n.members == nil {
		return ""
	}
	for _, addr := range n.members.rpcAddrs(true) {
		if addr == n.rpcAddr {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		var h wire.HelloResponse
		err := n.pool.Call(cctx, addr, wire.MethodHello, &wire.Empty{}, &h)
		cancel()
		if err == nil && h.LeaderAddr != "" {
			n.leaderHint.Store(h.LeaderAddr)
			return h.LeaderAddr
		}
	}
	return ""
}
