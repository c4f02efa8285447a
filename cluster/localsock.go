package cluster

import (
	"net"
	"os"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// SocketFile is the node's Unix socket in its data dir: local drivers,
// workers and the CLI reach the node over it, authenticated by their
// credentials (SO_PEERCRED) instead of a token, and off loopback TCP.
const SocketFile = "nodeup.sock"

// setupAuth makes the authenticator and, when the node has a token
// authority, has the RPC server enforce wire.MethodRoles. A secure node
// (no --insecure) always has one (serverTokens): the token table in its
// copy of the Raft state (raftTokens) while it is in the Raft
// configuration, else the leader's answers kept a few seconds
// (remoteTokens), unless Config.SetTokenAuthority gave another; it then
// refuses plaintext TCP clients everything but the open methods.
func (n *Node) setupAuth() error {
	gid, err := lookupGroup(n.cfg.SocketGroup)
	if err != nil {
		return err
	}
	if !n.cfg.Insecure && n.cfg.tokens == nil {
		n.remoteTokens = newRemoteTokens(n.tokens().caHash, n.askLeader)
		n.cfg.tokens = serverTokens{local: n.tokens(), remote: n.remoteTokens, member: n.hasRaftState}
	}
	n.auth = newAuthenticator(n.cfg.tokens, gid, !n.cfg.Insecure)
	if n.cfg.tokens != nil {
		n.rpcServer.SetAuth(n.auth.auth())
	}
	return nil
}

// listenSocket serves RPC on <data-dir>/nodeup.sock, mode 0660 and owned
// by the socket group if one is set. A socket left by a node that died is
// removed first (the data dir's lock says none runs). Failing to listen
// (a path over the 108-byte limit of sun_path, say) is logged and leaves
// local clients on TCP.
func (n *Node) listenSocket() {
	path := n.dir.file(SocketFile)
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		n.logger.Warn("no Unix socket for local clients; they use TCP", "path", path, "err", err)
		return
	}
	if err := os.Chmod(path, 0o660); err != nil {
		n.logger.Warn("Unix socket mode", "path", path, "err", err)
	}
	if n.auth.gid >= 0 {
		if err := os.Chown(path, -1, n.auth.gid); err != nil {
			n.logger.Warn("Unix socket group: members of --socket-group cannot connect", "path", path, "gid", n.auth.gid, "err", err)
		}
	}
	// The socket speaks RPC only: Raft connections on it are dropped.
	closed := newRaftLayer(ln.Addr())
	_ = closed.Close()
	n.sockLn, n.sockAddr = ln, rpc.UnixPrefix+path
	// Set before the node serves any connection, so before any worker starts.
	n.workers.cfg.nodeEnv = append(n.workers.cfg.nodeEnv, wire.EnvNodeSocket+"="+n.sockAddr)
	n.sockMux = newMux(ln, n.rpcServer.ServeConn, closed, n.logger)
	n.group.goFunc("socket-accept", n.sockMux.serve)
	// The node's calls to itself (forwarding while it leads, reports to
	// itself) take the socket: faster, and the local principal.
	n.pool.SetRoute(n.rpcAddr, n.sockAddr)
}

// SocketAddr returns the node's Unix socket as an address clients dial
// ("unix:///path/nodeup.sock"), "" when it has none.
func (n *Node) SocketAddr() string { return n.sockAddr }
