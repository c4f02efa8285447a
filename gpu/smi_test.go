package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/sched"
)

func readSMI(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "smi", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseSMIH100x8(t *testing.T) {
	t.Parallel()
	at := time.Unix(1700000000, 0)
	res, err := ParseSMI(readSMI(t, "h100x8.txt"), at)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Devices) != 8 || len(res.Samples) != 8 {
		t.Fatalf("got %d devices, %d samples, want 8 each", len(res.Devices), len(res.Samples))
	}
	for i, d := range res.Devices {
		if d.Index != i || d.Model != "H100" || d.Name != "NVIDIA H100 80GB HBM3" || d.MemoryBytes != 81559*mib || !strings.HasPrefix(d.UUID, "GPU-") {
			t.Errorf("device %d = %+v", i, d)
		}
	}
	s := res.Samples[3]
	if s.UtilizationPercent != 30 || s.TemperatureC != 33 || s.MemoryUsedBytes != 3073*mib || s.PowerWatts != 73.15 || !s.At.Equal(at) || s.MemoryTotalBytes != 81559*mib {
		t.Errorf("sample 3 = %+v", s)
	}
	r := Resources(res.Devices)
	want := sched.ResourceSet{
		sched.GPU:                             sched.QuantityOf(8),
		sched.AcceleratorTypeResource("H100"): sched.Unit,
		MemoryResource:                        sched.QuantityOf(8 * 81559 * mib),
	}
	if !r.Equal(want) {
		t.Errorf("Resources = %v, want %v", r, want)
	}
}

func TestParseSMIMixed(t *testing.T) {
	res, err := ParseSMI(readSMI(t, "mixed_a100_v100.txt"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var models []string
	for _, d := range res.Devices {
		models = append(models, d.Model)
	}
	if got := strings.Join(models, ","); got != "A100,A100,V100,V100" {
		t.Fatalf("models = %s", got)
	}
	// [N/A] and [Not Supported] read as Unknown, never as 0.
	s := res.Samples[3]
	if s.MemoryUsedBytes != Unknown || s.UtilizationPercent != Unknown || s.TemperatureC != Unknown || s.PowerWatts >= 0 {
		t.Errorf("sample 3 = %+v, want unknown values", s)
	}
	if res.Samples[2].PowerWatts >= 0 || res.Samples[2].TemperatureC != 35 {
		t.Errorf("sample 2 = %+v", res.Samples[2])
	}
	r := Resources(res.Devices)
	if r[sched.AcceleratorTypeResource("A100")] != sched.Unit || r[sched.AcceleratorTypeResource("V100")] != sched.Unit || r[sched.GPU] != sched.QuantityOf(4) {
		t.Errorf("Resources = %v", r)
	}
}

func TestParseSMIErrors(t *testing.T) {
	cases := map[string]string{
		"driver_error.txt":     "couldn't communicate with the NVIDIA driver",
		"malformed_fields.txt": "line 2 has 4 fields, want 8",
		"malformed_index.txt":  `index "zero"`,
		"malformed_memory.txt": `memory.total "lots"`,
	}
	for file, want := range cases {
		res, err := ParseSMI(readSMI(t, file), time.Now())
		if err == nil || !errors.Is(err, ErrSMI) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one wrapping ErrSMI containing %q", file, err, want)
		}
		if len(res.Devices) != 0 {
			t.Errorf("%s: devices %v returned with an error", file, res.Devices)
		}
	}
}

func TestParseSMINoGPUsAndLost(t *testing.T) {
	for _, in := range [][]byte{readSMI(t, "no_gpus.txt"), nil, []byte("\n\n")} {
		res, err := ParseSMI(in, time.Now())
		if err != nil || len(res.Devices) != 0 {
			t.Errorf("ParseSMI(%q) = %+v, %v; want no devices, no error", in, res, err)
		}
	}
	res, err := ParseSMI(readSMI(t, "lost_gpu.txt"), time.Now())
	if err != nil || len(res.Devices) != 1 || len(res.Problems) != 1 || !strings.Contains(res.Problems[0], "GPU is lost") {
		t.Errorf("lost: %+v, %v", res, err)
	}
}

func TestParseSMIApps(t *testing.T) {
	t.Parallel()
	procs, err := ParseSMIApps(readSMI(t, "apps.txt"))
	if err != nil {
		t.Fatal(err)
	}
	p := procs["GPU-5f1e2d3c-0000-1111-2222-333344445555"]
	if len(p) != 2 || p[0].PID != 4242 || p[0].UsedMemoryBytes != 1024*mib || p[1].UsedMemoryBytes != Unknown {
		t.Errorf("procs = %+v", procs)
	}
	if procs, err := ParseSMIApps(readSMI(t, "apps_none.txt")); err != nil || len(procs) != 0 {
		t.Errorf("none: %v, %v", procs, err)
	}
	if _, err := ParseSMIApps([]byte("GPU-x, notapid, 3\n")); err == nil || !strings.Contains(err.Error(), "notapid") {
		t.Errorf("bad pid: err = %v", err)
	}
}

// FuzzParseSMI: arbitrary output never panics, and every device it accepts
// has a UUID, a name and a non-negative index.
func FuzzParseSMI(f *testing.F) {
	for _, n := range []string{"h100x8.txt", "mixed_a100_v100.txt", "driver_error.txt", "malformed_fields.txt", "lost_gpu.txt"} {
		b, _ := os.ReadFile(filepath.Join("testdata", "smi", n))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := ParseSMI(b, time.Now())
		if err != nil {
			return
		}
		for _, d := range res.Devices {
			if d.UUID == "" || d.Name == "" || d.Index < 0 {
				t.Fatalf("accepted %+v", d)
			}
		}
	})
}

func TestQuerySMIFakeBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "nvidia-smi")
	body := "#!/bin/sh\ncase \"$1\" in --query-gpu*) cat " + filepath.Join(mustAbs(t, "testdata/smi"), "mixed_a100_v100.txt") + ";; *) cat " + filepath.Join(mustAbs(t, "testdata/smi"), "apps.txt") + ";; esac\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := QuerySMI(context.Background(), script)
	if err != nil || len(res.Devices) != 4 || len(res.Samples[0].Processes) != 2 || len(res.Samples[2].Processes) != 1 {
		t.Fatalf("QuerySMI = %+v, %v", res, err)
	}
	failing := filepath.Join(dir, "failing-smi")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\ncat "+filepath.Join(mustAbs(t, "testdata/smi"), "driver_error.txt")+"\nexit 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := QuerySMI(context.Background(), failing); err == nil || !strings.Contains(err.Error(), "NVIDIA driver") {
		t.Errorf("driver error: %v", err)
	}
	if _, err := QuerySMI(context.Background(), filepath.Join(dir, "absent")); !errors.Is(err, ErrSMI) {
		t.Errorf("missing binary: %v", err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A capture from a real node (nvidia-smi of driver 580.159.04 on one H200,
// 2026-11-28; the file is nvidia-smi's own output, not written by hand)
// parses to the device NVML found there (gpu-helper --probe on the same
// machine: model H200, 150754820096 bytes, as 143771 MiB).
func TestParseSMICapturedH200(t *testing.T) {
	res, err := ParseSMI(readSMI(t, "h200_captured.txt"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Devices) != 1 {
		t.Fatalf("devices = %+v, want one", res.Devices)
	}
	d, s := res.Devices[0], res.Samples[0]
	if d.Model != "H200" || d.UUID != "GPU-9f24b9cb-b295-0ab8-24ba-90c5f144425f" || d.MemoryBytes != 143771<<20 {
		t.Errorf("device = %+v; want H200, its UUID, 143771 MiB", d)
	}
	if s.TemperatureC != 36 || s.UtilizationPercent != 0 || s.MemoryUsedBytes != 0 || s.PowerWatts < 81 || s.PowerWatts > 82 {
		t.Errorf("sample = %+v; want 36 C, 0%%, 0 bytes used, 81.74 W", s)
	}
	if r := Resources(res.Devices); r[sched.AcceleratorTypeResource("H200")] != sched.Unit || r[sched.GPU] != sched.QuantityOf(1) {
		t.Errorf("resources = %v", r)
	}
}
