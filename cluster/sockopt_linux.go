package cluster

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tcpUserTimeout is how long data a node sent on a connection it opened may
// stay unacknowledged before the kernel aborts the connection
// (TCP_USER_TIMEOUT). Without it a pooled RPC connection to a peer behind a
// partition stays open, every call on it timing out, until TCP's
// retransmission backoff (up to 2 minutes between tries) next gets through
// after the heal: in the network-namespace partition test that held back a
// rejoined server's promotion by 15 s. Aborted, the pool dials afresh.
const tcpUserTimeout = 10 * time.Second

// dialControl sets tcpUserTimeout on an outgoing socket before it connects.
func dialControl(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(tcpUserTimeout.Milliseconds()))
	}); err != nil {
		return err
	}
	return serr
}
