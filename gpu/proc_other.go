//go:build !linux

package gpu

import (
	"os"
	"os/exec"
)

func setProcAttr(cmd *exec.Cmd) {}

// isDescendant only recognizes this process itself off Linux.
func isDescendant(pid int) bool { return pid == os.Getpid() }
