//go:build !linux

package cluster

import (
	"errors"
	"net"
)

// unixPeerCred is Linux-only (SO_PEERCRED); elsewhere a Unix-socket peer
// is not trusted by its credentials and must present a token.
func unixPeerCred(*net.UnixConn) (peerCreds, error) {
	return peerCreds{}, errors.New("peer credentials are read only on Linux")
}
