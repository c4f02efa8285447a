//go:build !linux

package cluster

import "syscall"

// dialControl sets nothing where TCP_USER_TIMEOUT does not exist.
func dialControl(network, address string, c syscall.RawConn) error { return nil }
