//go:build !linux

package cluster

import (
	"errors"
	"syscall"
)

// processStart reports whether process pid exists (kill(pid, 0)); its start
// time is unknown here (0), so a reused PID passes for the driver.
func processStart(pid int) (uint64, bool) {
	err := syscall.Kill(pid, 0)
	return 0, err == nil || errors.Is(err, syscall.EPERM)
}
