package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Where the kernel shows cgroup v2: the unified hierarchy and this
// process's place in it ("0::/system.slice/nodeup.service").
const (
	cgroupRoot     = "/sys/fs/cgroup"
	procSelfCgroup = "/proc/self/cgroup"
)

// cgroupLimits are the cgroup v2 limits on this process: CPUs from
// cpu.max (quota / period; 0 when unlimited) and Memory in bytes from
// memory.max (0 when unlimited). The tightest limit on the way from its
// cgroup up to the root counts, as the kernel enforces every level.
type cgroupLimits struct {
	CPUs   float64
	Memory int64
}

// maxCgroupDepth bounds the walk up the hierarchy.
const maxCgroupDepth = 64

// readCgroupLimits reads the cgroup v2 limits that apply to the process
// whose /proc/<pid>/cgroup is procCgroup, with the hierarchy mounted at
// root. Missing files mean no limit (cgroup v1, or a controller not
// enabled); a malformed file is an error naming it and is otherwise
// ignored. Both files are untrusted: reads are bounded, numbers checked.
func readCgroupLimits(root, procCgroup string) (cgroupLimits, error) {
	var lim cgroupLimits
	rel, err := unifiedCgroupPath(procCgroup)
	if err != nil || rel == "" {
		return lim, err
	}
	root = filepath.Clean(root)
	var errs []error
	// Join after Clean of an absolute path never leaves root, whatever the
	// file said ("/../../etc" is "/etc").
	dir := filepath.Join(root, filepath.Clean("/"+rel))
	for depth := 0; depth < maxCgroupDepth; depth++ {
		if cpus, err := readCPUMax(filepath.Join(dir, "cpu.max")); err != nil {
			errs = append(errs, err)
		} else if cpus > 0 && (lim.CPUs == 0 || cpus < lim.CPUs) {
			lim.CPUs = cpus
		}
		if mem, err := readMemoryMax(filepath.Join(dir, "memory.max")); err != nil {
			errs = append(errs, err)
		} else if mem > 0 && (lim.Memory == 0 || mem < lim.Memory) {
			lim.Memory = mem
		}
		if dir == root || len(dir) <= len(root) {
			break
		}
		dir = filepath.Dir(dir)
	}
	return lim, errors.Join(errs...)
}

// unifiedCgroupPath is the path of the "0::<path>" line of a
// /proc/<pid>/cgroup file, "" when there is none (no cgroup v2).
func unifiedCgroupPath(procCgroup string) (string, error) {
	f, err := os.Open(procCgroup)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	sc.Buffer(make([]byte, 0, 4096), 4096)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			if !strings.HasPrefix(p, "/") {
				return "", fmt.Errorf("%s: cgroup v2 path %q is not absolute", procCgroup, p)
			}
			return p, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", procCgroup, err)
	}
	return "", nil
}

// readSmall returns the trimmed content of a small kernel file, "" when it
// does not exist.
func readSmall(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 129))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > 128 {
		return "", fmt.Errorf("%s: longer than 128 bytes; want one line", path)
	}
	return strings.TrimSpace(string(b)), nil
}

// readCPUMax reads cpu.max, "<quota> <period>" in µs or "max <period>",
// as CPUs (0: unlimited or no file).
func readCPUMax(path string) (float64, error) {
	s, err := readSmall(path)
	if err != nil || s == "" {
		return 0, err
	}
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return 0, fmt.Errorf("%s: %q: want \"<quota> <period>\" or \"max <period>\"", path, s)
	}
	period, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil || period == 0 {
		return 0, fmt.Errorf("%s: period %q: want a positive whole number of microseconds", path, fields[1])
	}
	if fields[0] == "max" {
		return 0, nil
	}
	quota, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil || quota == 0 {
		return 0, fmt.Errorf("%s: quota %q: want \"max\" or a positive whole number of microseconds", path, fields[0])
	}
	return float64(quota) / float64(period), nil
}

// readMemoryMax reads memory.max, bytes or "max" (0: unlimited or no file).
func readMemoryMax(path string) (int64, error) {
	s, err := readSmall(path)
	if err != nil || s == "" || s == "max" {
		return 0, err
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s: %q: want \"max\" or a positive number of bytes", path, s)
	}
	return int64(min(n, math.MaxInt64)), nil
}

// cgroupCPUs caps numCPU by a CPU limit: the limit rounded up to a whole
// CPU (a 0.5-CPU quota still runs a 1-CPU task, at half speed), never
// more than numCPU. No limit (0) leaves numCPU.
func cgroupCPUs(numCPU int, limit float64) int64 {
	if limit <= 0 {
		return int64(numCPU)
	}
	return min(int64(numCPU), int64(math.Ceil(limit)))
}

// processLimits reads this process's cgroup v2 limits once, logging them
// when there are any and any malformed file (ignored).
var processLimits = sync.OnceValue(func() cgroupLimits {
	lim, err := readCgroupLimits(cgroupRoot, procSelfCgroup)
	if err != nil {
		slog.Warn("cgroup v2 limits: a file was ignored (--num-cpus and --memory defaults may be too high; set them)", "err", err)
	}
	if lim.CPUs > 0 || lim.Memory > 0 {
		slog.Info("cgroup v2 limits lower the --num-cpus and --memory defaults", "cpus", lim.CPUs, "memory_bytes", lim.Memory)
	}
	return lim
})

// defaultCPUs is --num-cpus's default: logical CPUs (runtime.NumCPU,
// which honours the CPU affinity mask, as cpusets set it), capped by the
// cgroup v2 cpu.max quota rounded up (cgroupCPUs).
func defaultCPUs() int64 {
	return cgroupCPUs(runtime.NumCPU(), processLimits().CPUs)
}
