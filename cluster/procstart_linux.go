package cluster

import (
	"bytes"
	"os"
	"strconv"
)

// processStart returns the start time of process pid (clock ticks since
// boot, /proc/<pid>/stat field 22), and false when no such process runs
// here: it does not exist, is not visible from this PID namespace, or is a
// zombie (exited, not yet reaped by its parent).
func processStart(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it follow the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || f[0][0] == 'Z' || f[0][0] == 'X' {
		return 0, false
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, false
	}
	return start, true
}
