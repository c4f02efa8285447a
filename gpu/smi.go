package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// SMIQueryArgs are the nvidia-smi arguments the fallback runs; ParseSMI reads
// their output. Fields in order: index, uuid, name, memory.total (MiB),
// memory.used (MiB), utilization.gpu (%), temperature.gpu (°C),
// power.draw (W).
var SMIQueryArgs = []string{
	"--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw",
	"--format=csv,noheader,nounits",
}

// SMIAppsArgs are the nvidia-smi arguments listing compute processes;
// ParseSMIApps reads their output. Fields: gpu_uuid, pid, used_memory (MiB).
var SMIAppsArgs = []string{
	"--query-compute-apps=gpu_uuid,pid,used_memory",
	"--format=csv,noheader,nounits",
}

// smiFields is the number of comma-separated fields per SMIQueryArgs line.
const smiFields = 8

// mib is one MiB in bytes; nvidia-smi's nounits memory is in MiB.
const mib = 1 << 20

// ErrSMI is wrapped by every error ParseSMI and ParseSMIApps return, and by
// QuerySMI when nvidia-smi fails (missing, no driver, bad output).
var ErrSMI = errors.New("nvidia-smi")

// SMIResult is what one nvidia-smi query found.
type SMIResult struct {
	// Devices are the GPUs listed, in output order.
	Devices []Device
	// Samples are their readings, one per device, in the same order.
	Samples []Sample
	// Problems are per-device error lines nvidia-smi printed instead of a
	// row ("Unable to determine the device handle for GPU0000:3B:00.0:
	// GPU is lost"); the device is missing from Devices.
	Problems []string
}

// ParseSMI parses the output of `nvidia-smi SMIQueryArgs...` taken at time
// at. "No devices were found" is a result with no devices, not an error.
// Driver failures ("NVIDIA-SMI has failed because it couldn't communicate
// with the NVIDIA driver...") and malformed lines (wrong field count, a
// non-numeric index or memory size) are errors wrapping ErrSMI that quote the
// line and its number; values nvidia-smi cannot measure ("[N/A]",
// "[Not Supported]") read as Unknown.
func ParseSMI(out []byte, at time.Time) (SMIResult, error) {
	var res SMIResult
	for n, line := range lines(out) {
		if strings.HasPrefix(line, "No devices were found") {
			continue
		}
		if strings.HasPrefix(line, "Unable to determine the device handle") {
			res.Problems = append(res.Problems, line)
			continue
		}
		if strings.Contains(line, "NVIDIA-SMI has failed") || strings.Contains(line, "couldn't communicate with the NVIDIA driver") {
			return SMIResult{}, fmt.Errorf("%w: driver error: %s", ErrSMI, line)
		}
		f := strings.Split(line, ",")
		if len(f) != smiFields {
			return SMIResult{}, fmt.Errorf("%w: line %d has %d fields, want %d (index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw): %q", ErrSMI, n+1, len(f), smiFields, line)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return SMIResult{}, fmt.Errorf("%w: line %d: index %q is not a device index: %q", ErrSMI, n+1, f[0], line)
		}
		total, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			return SMIResult{}, fmt.Errorf("%w: line %d: memory.total %q is not a number of MiB: %q", ErrSMI, n+1, f[3], line)
		}
		if f[1] == "" || f[2] == "" {
			return SMIResult{}, fmt.Errorf("%w: line %d: empty uuid or name: %q", ErrSMI, n+1, line)
		}
		d := Device{Index: idx, UUID: f[1], Name: f[2], Model: ShortModel(f[2]), MemoryBytes: total * mib}
		s := Sample{
			Index: idx, UUID: d.UUID, At: at,
			UtilizationPercent: smiInt(f[5]),
			MemoryUsedBytes:    int64(Unknown),
			MemoryTotalBytes:   d.MemoryBytes,
			TemperatureC:       smiInt(f[6]),
			PowerWatts:         -1,
		}
		if used := smiInt(f[4]); used != Unknown {
			s.MemoryUsedBytes = int64(used) * mib
		}
		if w, err := strconv.ParseFloat(f[7], 64); err == nil && w >= 0 {
			s.PowerWatts = w
		}
		res.Devices = append(res.Devices, d)
		res.Samples = append(res.Samples, s)
	}
	return res, nil
}

// ParseSMIApps parses the output of `nvidia-smi SMIAppsArgs...` into the
// processes on each device, keyed by device UUID. "No running processes
// found" (or nothing) is an empty map. A malformed line is an error wrapping
// ErrSMI quoting it.
func ParseSMIApps(out []byte) (map[string][]Process, error) {
	procs := map[string][]Process{}
	for n, line := range lines(out) {
		if strings.HasPrefix(line, "No running processes found") {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: compute-apps line %d has %d fields, want 3 (gpu_uuid,pid,used_memory): %q", ErrSMI, n+1, len(f), line)
		}
		uuid := strings.TrimSpace(f[0])
		pid, err := strconv.Atoi(strings.TrimSpace(f[1]))
		if err != nil || uuid == "" {
			return nil, fmt.Errorf("%w: compute-apps line %d: bad uuid or pid: %q", ErrSMI, n+1, line)
		}
		p := Process{PID: pid, UsedMemoryBytes: int64(Unknown)}
		if m := smiInt(strings.TrimSpace(f[2])); m != Unknown {
			p.UsedMemoryBytes = int64(m) * mib
		}
		procs[uuid] = append(procs[uuid], p)
	}
	return procs, nil
}

// QuerySMI runs nvidia-smi (path, or "nvidia-smi" from PATH when empty) with
// SMIQueryArgs and parses its output, then adds each device's processes from
// a second run with SMIAppsArgs (left out when that run fails). ctx bounds
// both runs; a hung nvidia-smi is killed when it ends. A missing binary, a
// non-zero exit without parsable rows, or bad output is an error wrapping
// ErrSMI.
func QuerySMI(ctx context.Context, path string) (SMIResult, error) {
	if path == "" {
		path = "nvidia-smi"
	}
	out, runErr := runSMI(ctx, path, SMIQueryArgs)
	res, err := ParseSMI(out, time.Now())
	if err != nil {
		return SMIResult{}, err
	}
	if runErr != nil && len(res.Devices) == 0 {
		msg := firstLine(out)
		if msg == "" {
			return SMIResult{}, fmt.Errorf("%w: %v", ErrSMI, runErr)
		}
		return SMIResult{}, fmt.Errorf("%w: %v: %s", ErrSMI, runErr, msg)
	}
	if len(res.Devices) == 0 {
		return res, nil
	}
	if out, err := runSMI(ctx, path, SMIAppsArgs); err == nil {
		if procs, err := ParseSMIApps(out); err == nil {
			for i := range res.Samples {
				res.Samples[i].Processes = procs[res.Samples[i].UUID]
			}
		}
	}
	return res, nil
}

func runSMI(ctx context.Context, path string, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = time.Second
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	return buf.Bytes(), err
}

// lines returns out's non-blank lines, trimmed.
func lines(out []byte) []string {
	var ls []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

func firstLine(out []byte) string {
	if ls := lines(out); len(ls) > 0 {
		return ls[0]
	}
	return ""
}

// smiInt parses a whole nvidia-smi number; "[N/A]", "[Not Supported]" and
// anything else unparsable give Unknown. A fractional value is truncated.
func smiInt(s string) int {
	if v, err := strconv.Atoi(s); err == nil && v >= 0 {
		return v
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil && v >= 0 {
		return int(v)
	}
	return Unknown
}
