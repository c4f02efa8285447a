package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
)

// The test binary doubles as a fake NVML helper: run with
// NODEUP_FAKE_GPU_HELPER set to a comma-separated list of behaviours it
// speaks the helper protocol. "x@n" applies behaviour x on the n-th start
// only (starts counted in the file FAKE_STATE, from 1), a bare "x" on
// every start. Behaviours: ok, crash (exit 2 after two samples), hang
// (silent after one sample), garbage (a bad frame after one sample), fatal (NVML unavailable), exit (exit before
// hello), lose (list only device 0), health (Xid 79 on device 1).
func TestMain(m *testing.M) {
	if mode := os.Getenv("NODEUP_FAKE_GPU_HELPER"); mode != "" {
		os.Exit(fakeHelper(mode))
	}
	os.Exit(m.Run())
}

func fakeHelper(mode string) int {
	start := 1
	if st := os.Getenv("FAKE_STATE"); st != "" {
		b, _ := os.ReadFile(st)
		start, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		start++
		_ = os.WriteFile(st, []byte(strconv.Itoa(start)), 0o644)
	}
	on := map[string]bool{}
	for _, b := range strings.Split(mode, ",") {
		name, at, found := strings.Cut(b, "@")
		if !found || at == strconv.Itoa(start) {
			on[name] = true
		}
	}
	if on["exit"] {
		fmt.Fprintln(os.Stderr, "fake helper: exiting before hello")
		return 1
	}
	hello, err := ReadFrame(os.Stdin)
	if err != nil {
		return 1
	}
	out := os.Stdout
	if on["fatal"] {
		_ = WriteFrame(out, &Frame{Type: FrameError, Error: "NVML: Driver Not Loaded", Fatal: true})
		return ExitUnavailable
	}
	_ = WriteFrame(out, &Frame{Type: FrameHello, Version: ProtocolVersion, Driver: "550.54.15"})
	devs := []Device{
		{Index: 0, UUID: "GPU-fake-0", Name: "NVIDIA H100 80GB HBM3", Model: "H100", MemoryBytes: 80 * gib},
		{Index: 1, UUID: "GPU-fake-1", Name: "NVIDIA H100 80GB HBM3", Model: "H100", MemoryBytes: 80 * gib},
	}
	if on["lose"] {
		devs = devs[:1]
	}
	_ = WriteFrame(out, &Frame{Type: FrameDevices, Devices: devs})
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = ReadFrame(os.Stdin) // the node closes stdin to stop us
		close(stdinClosed)
	}()
	interval := time.Duration(hello.IntervalMS) * time.Millisecond
	t := time.NewTicker(interval)
	for n := 1; ; n++ {
		select {
		case <-stdinClosed:
			return 0
		case <-t.C:
		}
		var samples []Sample
		for _, d := range devs {
			samples = append(samples, Sample{Index: d.Index, UUID: d.UUID, At: time.Now(), UtilizationPercent: 10 * n % 100, MemoryUsedBytes: int64(n) * gib, MemoryTotalBytes: d.MemoryBytes, TemperatureC: 40, PowerWatts: 100.5,
				Processes: []Process{{PID: os.Getppid(), UsedMemoryBytes: gib}, {PID: 1, UsedMemoryBytes: 2 * gib}}})
		}
		_ = WriteFrame(out, &Frame{Type: FrameSamples, Samples: samples})
		switch {
		case on["health"] && n == 1:
			_ = WriteFrame(out, &Frame{Type: FrameHealth, Health: []HealthEvent{{Index: 1, UUID: "GPU-fake-1", Reason: "Xid 79 (critical)", Xid: 79, At: time.Now()}}})
		case on["crash"] && n == 2:
			fmt.Fprintln(os.Stderr, "fake helper: crashing")
			return 2
		case on["garbage"] && n == 1:
			_, _ = out.Write([]byte{0xff, 0xff, 0xff, 0xff, 0xc1})
		case on["hang"] && n == 1:
			select {} // silent forever, ignoring stdin: only a kill ends it
		}
	}
}

func testConfig(t *testing.T, mode string) (Config, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		DataDir:      t.TempDir(),
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Interval:     50 * time.Millisecond,
		HangTimeout:  500 * time.Millisecond,
		StartTimeout: 10 * time.Second,
		MinBackoff:   20 * time.Millisecond,
		MaxBackoff:   100 * time.Millisecond,
		HelperPath:   exe,
		HelperEnv: []string{
			"NODEUP_FAKE_GPU_HELPER=" + mode,
			"FAKE_STATE=" + filepath.Join(t.TempDir(), "starts"),
		},
		NoSMI: true,
	}, logs
}

// waitStatus waits (at most 15 s) until ok accepts s's status.
func waitStatus(t *testing.T, s *Supervisor, what string, ok func(Status) bool) {
	t.Helper()
	testutil.Until(t, 15*time.Second, what, func() error {
		if st := s.Status(); !ok(st) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}

func start(t *testing.T, cfg Config) *Supervisor {
	t.Helper()
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func TestSupervisorHelperDevicesAndTelemetry(t *testing.T) {
	cfg, logs := testConfig(t, "ok")
	s := start(t, cfg)
	if s.Source() != SourceNVML {
		t.Fatalf("source %s, logs:\n%s", s.Source(), logs)
	}
	want := sched.ResourceSet{sched.GPU: sched.QuantityOf(2), sched.AcceleratorTypeResource("H100"): sched.Unit, MemoryResource: sched.QuantityOf(160 * gib)}
	if r := s.Resources(); !r.Equal(want) {
		t.Errorf("Resources = %v, want %v", r, want)
	}
	waitStatus(t, s, "samples for both devices", func(st Status) bool {
		return len(st.Devices) == 2 && st.Devices[0].Sample != nil && st.Devices[1].Sample != nil
	})
	st := s.Status()
	if !st.HelperRunning || st.Driver != "550.54.15" {
		t.Errorf("status %+v", st)
	}
	smp := st.Devices[1].Sample
	if smp.MemoryTotalBytes != 80*gib || smp.TemperatureC != 40 || smp.PowerWatts != 100.5 || len(smp.Processes) != 2 {
		t.Fatalf("sample %+v", smp)
	}
	// The test process plays the node: its PID is ours, PID 1 is not.
	if smp.Processes[0].Foreign || !smp.Processes[1].Foreign {
		t.Errorf("foreign flags: %+v", smp.Processes)
	}
	s.Stop()
	if s.Status().HelperRunning {
		t.Error("helper still running after Stop")
	}
}

func TestSupervisorRestartsCrashedHelper(t *testing.T) {
	cfg, logs := testConfig(t, "crash@1,crash@2")
	s := start(t, cfg)
	held, err := s.Allocator().Assign(Request{GPU: sched.Unit})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, "two restarts and a running helper", func(st Status) bool {
		return st.HelperRestarts >= 2 && st.HelperRunning
	})
	// Crashes never took devices out or lost the live assignment.
	if r := s.Resources(); r[sched.GPU] != sched.QuantityOf(2) {
		t.Errorf("Resources after crashes = %v", r)
	}
	if err := s.Allocator().Release(held); err != nil {
		t.Error(err)
	}
	if l := logs.String(); !strings.Contains(l, "GPU helper failed; restarting it") || !strings.Contains(l, "fake helper: crashing") {
		t.Errorf("logs lack the crash:\n%s", l)
	}
	if st := s.Status(); st.HelperRestarts != 2 {
		t.Errorf("restarts = %d, want 2 (starts 1 and 2 crash, 3 stays up)", st.HelperRestarts)
	}
}

func TestSupervisorKillsHungHelper(t *testing.T) {
	cfg, logs := testConfig(t, "hang@1")
	s := start(t, cfg)
	waitStatus(t, s, "a restart after the hang", func(st Status) bool {
		return st.HelperRestarts == 1 && st.HelperRunning
	})
	if l := logs.String(); !strings.Contains(l, "GPU helper hung: no frame for") {
		t.Errorf("logs lack the hang:\n%s", l)
	}
	if _, err := s.Allocator().Assign(Request{GPU: sched.QuantityOf(2)}); err != nil {
		t.Errorf("devices not schedulable after the hang: %v", err)
	}
}

func TestSupervisorRestartsHelperSendingGarbage(t *testing.T) {
	cfg, logs := testConfig(t, "garbage@1")
	s := start(t, cfg)
	waitStatus(t, s, "a restart after the bad frame", func(st Status) bool {
		return st.HelperRestarts == 1 && st.HelperRunning
	})
	if l := logs.String(); !strings.Contains(l, "frame too large") {
		t.Errorf("logs lack the bad frame:\n%s", l)
	}
}

func TestSupervisorHealthEvent(t *testing.T) {
	cfg, logs := testConfig(t, "health")
	events := make(chan HealthEvent, 4)
	cfg.OnHealth = func(ev HealthEvent) { events <- ev }
	s := start(t, cfg)
	var ev HealthEvent
	select {
	case ev = <-events:
	case <-time.After(15 * time.Second):
		t.Fatal("no health event")
	}
	if ev.Index != 1 || ev.UUID != "GPU-fake-1" || ev.Healthy || ev.Xid != 79 {
		t.Errorf("event %+v", ev)
	}
	if r := s.Resources(); r[sched.GPU] != sched.Unit || r[MemoryResource] != sched.QuantityOf(80*gib) {
		t.Errorf("Resources = %v", r)
	}
	st := s.Status()
	if st.Devices[1].Healthy || !strings.Contains(st.Devices[1].Reason, "Xid 79") || !st.Devices[0].Healthy {
		t.Errorf("status %+v", st.Devices)
	}
	if _, err := s.Allocator().Assign(Request{GPU: sched.QuantityOf(2)}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("2 GPUs with one unhealthy: %v", err)
	}
	if !strings.Contains(logs.String(), "GPU unhealthy, taken out of scheduling") {
		t.Errorf("no log line:\n%s", logs)
	}
}

func TestSupervisorDeviceMissingAfterRestart(t *testing.T) {
	cfg, _ := testConfig(t, "crash@1,lose@2")
	events := make(chan HealthEvent, 4)
	cfg.OnHealth = func(ev HealthEvent) { events <- ev }
	s := start(t, cfg)
	select {
	case ev := <-events:
		if ev.UUID != "GPU-fake-1" || ev.Reason != "missing after GPU helper restart" {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no health event for the lost device")
	}
	if h := s.Allocator().Healthy(); len(h) != 1 || h[0].UUID != "GPU-fake-0" {
		t.Errorf("healthy %+v", h)
	}
}

func TestSupervisorReconcile(t *testing.T) {
	cfg, logs := testConfig(t, "ok")
	var got []HealthEvent
	var mu sync.Mutex
	cfg.OnHealth = func(ev HealthEvent) { mu.Lock(); got = append(got, ev); mu.Unlock() }
	s := start(t, cfg)
	s.reconcile([]Device{{Index: 0, UUID: "GPU-fake-0"}, {Index: 1, UUID: "GPU-new"}})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].UUID != "GPU-fake-1" || got[0].Reason != "missing after GPU helper restart" {
		t.Errorf("events %+v", got)
	}
	if h := s.Allocator().Healthy(); len(h) != 1 || h[0].UUID != "GPU-fake-0" {
		t.Errorf("healthy %+v", h)
	}
	if l := logs.String(); strings.Count(l, "new GPU appeared") != 1 || !strings.Contains(l, "GPU-new") {
		t.Errorf("logs should name the one new GPU:\n%s", l)
	}
}

func writeSMIScript(t *testing.T, fixture string) (script, fixtureCopy string) {
	t.Helper()
	dir := t.TempDir()
	fixtureCopy = filepath.Join(dir, "out.txt")
	if err := os.WriteFile(fixtureCopy, readSMI(t, fixture), 0o644); err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "nvidia-smi")
	body := "#!/bin/sh\ncase \"$1\" in --query-gpu*) cat " + fixtureCopy + ";; *) echo 'No running processes found';; esac\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, fixtureCopy
}

func TestSupervisorFallsBackToSMI(t *testing.T) {
	for _, mode := range []string{"fatal", "exit", "fatal@1,crash", "exit@1"} {
		t.Run(mode, func(t *testing.T) {
			cfg, logs := testConfig(t, mode)
			script, out := writeSMIScript(t, "mixed_a100_v100.txt")
			cfg.SMIPath, cfg.NoSMI = script, false
			s := start(t, cfg)
			if s.Source() != SourceSMI {
				t.Fatalf("source %s; logs:\n%s", s.Source(), logs)
			}
			r := s.Resources()
			if r[sched.GPU] != sched.QuantityOf(4) || r[sched.AcceleratorTypeResource("V100")] != sched.Unit {
				t.Errorf("Resources = %v", r)
			}
			if st := s.Status(); st.Devices[1].Sample == nil || st.Devices[1].Sample.UtilizationPercent != 97 {
				t.Errorf("no sample from the first nvidia-smi run: %+v", st.Devices)
			}
			// Device 3 disappears from nvidia-smi's output: unhealthy.
			b, _ := os.ReadFile(out)
			ls := strings.Split(strings.TrimSpace(string(b)), "\n")
			if err := os.WriteFile(out, []byte(strings.Join(ls[:3], "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, s, "device 3 unhealthy", func(st Status) bool { return !st.Devices[3].Healthy })
			if r := s.Resources(); r[sched.GPU] != sched.QuantityOf(3) {
				t.Errorf("Resources = %v", r)
			}
		})
	}
}

func TestSupervisorNoGPUsLogsOneLine(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	cfg := Config{
		DataDir: t.TempDir(),
		Logger:  slog.New(slog.NewTextHandler(logs, nil)), // Info and up
		SMIPath: filepath.Join(t.TempDir(), "no-nvidia-smi"),
	}
	s := start(t, cfg)
	if s.Source() != SourceNone || !s.Resources().IsZero() || len(s.Status().Devices) != 0 {
		t.Fatalf("status %+v", s.Status())
	}
	l := strings.TrimSpace(logs.String())
	if strings.Count(l, "\n") != 0 || !strings.Contains(l, "no GPUs on this node") {
		t.Errorf("want exactly one line saying no GPUs, got:\n%s", l)
	}
	as, err := s.Allocator().Assign(Request{})
	if err != nil || as.CUDAVisibleDevices() != "" {
		t.Errorf("zero request on a GPU-less node: %v, %v", as, err)
	}
	if _, err := s.Allocator().Assign(Request{GPU: sched.Unit}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("1 GPU on a GPU-less node: %v", err)
	}
}

func TestSupervisorDeclared(t *testing.T) {
	devs, err := Declared(4, "NVIDIA A100-SXM4-40GB", 40*gib)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := testConfig(t, "exit") // the helper must not even run
	cfg.Declare, cfg.Declared = true, devs
	s := start(t, cfg)
	want := sched.ResourceSet{sched.GPU: sched.QuantityOf(4), sched.AcceleratorTypeResource("A100"): sched.Unit, MemoryResource: sched.QuantityOf(160 * gib)}
	if s.Source() != SourceDeclared || !s.Resources().Equal(want) {
		t.Errorf("source %s, resources %v", s.Source(), s.Resources())
	}
	as, err := s.Allocator().Assign(Request{GPU: sched.QuantityOf(2)})
	if err != nil || as.NvidiaVisibleDevices() != "0,1" {
		t.Errorf("declared assign: %+v %v", as, err)
	}
	none, _ := Declared(0, "", 0)
	cfg.Declared = none
	if s := start(t, cfg); s.Source() != SourceDeclared || !s.Resources().IsZero() {
		t.Errorf("--num-gpus 0: %v", s.Resources())
	}
	if _, err := Declared(-1, "H100", 0); err == nil || !strings.Contains(err.Error(), "-1") {
		t.Errorf("Declared(-1) = %v", err)
	}
	if d, _ := Declared(1, "H100", 0); d[0].Model != "H100" || !Resources(d).Equal(sched.ResourceSet{sched.GPU: sched.Unit, sched.AcceleratorTypeResource("H100"): sched.Unit}) {
		t.Errorf("Declared(1, H100) = %+v", d)
	}
}

// TestSupervisorEmbeddedHelper runs the whole embedded path: the helper
// bytes (here a script re-executing the fake) are written into the data
// dir under their sha256, started, and reused on the next start.
func TestSupervisorEmbeddedHelper(t *testing.T) {
	exe, _ := os.Executable()
	saved := embeddedHelper
	t.Cleanup(func() { embeddedHelper, helperSum = saved, onceSum() })
	embeddedHelper = "#!/bin/sh\nexec " + exe + " \"$@\"\n"
	helperSum = onceSum()

	cfg, logs := testConfig(t, "ok")
	cfg.HelperPath = ""
	s := start(t, cfg)
	if s.Source() != SourceNVML {
		t.Fatalf("source %s; logs:\n%s", s.Source(), logs)
	}
	path, err := ExtractHelper(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "gpu-helper-"+helperSum() || filepath.Dir(path) != filepath.Join(cfg.DataDir, "bin") {
		t.Errorf("helper at %s", path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("stat %v %v", fi, err)
	}
	// A corrupted copy is replaced; an intact one is left alone.
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ExtractHelper(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != embeddedHelper {
		t.Error("corrupted helper not replaced")
	}
	before, _ := os.Stat(path)
	if _, err := ExtractHelper(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Error("intact helper rewritten")
	}
	embeddedHelper = ""
	if _, err := ExtractHelper(cfg.DataDir); !errors.Is(err, ErrNoHelper) {
		t.Errorf("no helper: %v", err)
	}
}
