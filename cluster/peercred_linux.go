package cluster

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// unixPeerCred returns the credentials of the process at the other end of
// uc, as the kernel recorded them at connect (SO_PEERCRED).
func unixPeerCred(uc *net.UnixConn) (peerCreds, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return peerCreds{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peerCreds{}, err
	}
	if serr != nil {
		return peerCreds{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return peerCreds{PID: cred.Pid, UID: int(cred.Uid), GID: int(cred.Gid)}, nil
}
