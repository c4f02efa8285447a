package gpu

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// setProcAttr makes the helper die with the node (SIGKILL when the node
// exits, even by kill -9) and puts it in its own process group, so a
// terminal's Ctrl-C reaches the node, which then stops it in order.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// isDescendant reports whether pid is this process or one of its
// descendants, following parent links in /proc. A PID not visible here (in
// another PID namespace, or gone) is not a descendant.
func isDescendant(pid int) bool {
	self := os.Getpid()
	for depth := 0; depth < 64 && pid > 1; depth++ {
		if pid == self {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// The command name in parentheses may hold spaces; fields after the
		// last ')' are: state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return false
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
	}
	return false
}
