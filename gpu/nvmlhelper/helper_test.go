//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/internal/testutil"
)

// fakeDGX is go-nvml's DGX A100 mock (eight A100-SXM4-40GB) with the
// telemetry and event calls the mock leaves out filled in, and a way to
// inject NVML events and lost GPUs.
type fakeDGX struct {
	*dgxa100.Server
	events chan nvml.EventData
	mu     sync.Mutex
	lost   map[int]bool
}

func newFakeDGX() *fakeDGX {
	f := &fakeDGX{Server: dgxa100.New(), events: make(chan nvml.EventData, 8), lost: map[int]bool{}}
	for i, dev := range f.Devices {
		d := dev.(*dgxa100.Device)
		d.MemoryInfo.Used = uint64(i) << 30
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.lost[i] {
				return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
			}
			return d.MemoryInfo, nvml.SUCCESS
		}
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 5}, nvml.SUCCESS
		}
		d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			return uint32(30 + i), nvml.SUCCESS
		}
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
			if i == 7 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return uint32(100000 + 500*i), nvml.SUCCESS // milliwatts
		}
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			if i != 2 {
				return nil, nvml.SUCCESS
			}
			return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1 << 30}, {Pid: 4343, UsedGpuMemory: notAvailable}}, nvml.SUCCESS
		}
		d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			if i != 2 {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
			return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
		}
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError | nvml.EventTypePState, nvml.SUCCESS
		}
		d.RegisterEventsFunc = func(mask uint64, set nvml.EventSet) nvml.Return {
			if mask&^(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError) != 0 {
				return nvml.ERROR_INVALID_ARGUMENT // only health events are asked for
			}
			return nvml.SUCCESS
		}
	}
	f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				select {
				case ev := <-f.events:
					return ev, nvml.SUCCESS
				case <-time.After(time.Duration(ms) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return f
}

// session runs the helper against lib and gives the test the node's side.
type session struct {
	t      *testing.T
	stdin  *io.PipeWriter
	stdout *io.PipeReader
	stderr *testutil.SyncBuffer
	exit   chan int
}

func startHelper(t *testing.T, lib nvml.Interface, intervalMS int64) *session {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &session{t: t, stdin: inW, stdout: outR, exit: make(chan int, 1), stderr: &testutil.SyncBuffer{}}
	logs := s.stderr
	go func() {
		code := run(lib, inR, outW, logs)
		outW.Close()
		s.exit <- code
	}()
	go func() {
		_ = gpu.WriteFrame(inW, &gpu.Frame{Type: gpu.FrameHello, Version: gpu.ProtocolVersion, IntervalMS: intervalMS})
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return s
}

func (s *session) next(want gpu.FrameType) *gpu.Frame {
	s.t.Helper()
	f, err := gpu.ReadFrame(s.stdout)
	if err != nil {
		s.t.Fatalf("reading %s frame: %v", want, err)
	}
	if f.Type != want {
		s.t.Fatalf("got %s frame %+v, want %s", f.Type, f, want)
	}
	return f
}

// nextHealth skips sample frames until a health frame arrives.
func (s *session) nextHealth() gpu.HealthEvent {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		f, err := gpu.ReadFrame(s.stdout)
		if err != nil {
			s.t.Fatal(err)
		}
		if f.Type == gpu.FrameHealth {
			if len(f.Health) != 1 {
				s.t.Fatalf("health frame %+v", f)
			}
			return f.Health[0]
		}
	}
	s.t.Fatal("no health frame")
	return gpu.HealthEvent{}
}

func TestHelperAgainstDGXA100Mock(t *testing.T) {
	f := newFakeDGX()
	s := startHelper(t, f, 20)

	hello := s.next(gpu.FrameHello)
	if hello.Version != gpu.ProtocolVersion || hello.Driver != "550.54.15" || hello.NVML != "12.550.54.15" {
		t.Errorf("hello %+v", hello)
	}
	devs := s.next(gpu.FrameDevices).Devices
	if len(devs) != 8 {
		t.Fatalf("%d devices, want 8", len(devs))
	}
	for i, d := range devs {
		want := f.Devices[i].(*dgxa100.Device)
		if d.Index != i || d.UUID != want.UUID || d.Model != "A100" || d.Name != "Mock NVIDIA A100-SXM4-40GB" || d.MemoryBytes != 42949672960 {
			t.Errorf("device %d = %+v", i, d)
		}
	}
	r := gpu.Resources(devs)
	if r.String() != "GPU=8, accelerator_type:A100=1, gpu_memory=343597383680" {
		t.Errorf("resources %s", r)
	}

	samples := s.next(gpu.FrameSamples).Samples
	if len(samples) != 8 {
		t.Fatalf("%d samples", len(samples))
	}
	s2 := samples[2]
	if s2.UtilizationPercent != 20 || s2.TemperatureC != 32 || s2.PowerWatts != 101 || s2.MemoryUsedBytes != 2<<30 || s2.MemoryTotalBytes != 42949672960 {
		t.Errorf("sample 2 = %+v", s2)
	}
	if len(s2.Processes) != 2 || s2.Processes[0].PID != 4242 || s2.Processes[0].UsedMemoryBytes != 1<<30 || s2.Processes[1].UsedMemoryBytes != gpu.Unknown {
		t.Errorf("processes on 2 = %+v", s2.Processes)
	}
	if samples[7].PowerWatts >= 0 {
		t.Errorf("unsupported power read as %v", samples[7].PowerWatts)
	}

	// An application Xid (13) is ignored; a critical one (79) is not.
	f.events <- nvml.EventData{Device: f.Devices[1], EventType: nvml.EventTypeXidCriticalError, EventData: 13}
	f.events <- nvml.EventData{Device: f.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	ev := s.nextHealth()
	if ev.Index != 3 || ev.UUID != devs[3].UUID || ev.Healthy || ev.Xid != 79 || ev.Reason != "Xid 79 (critical)" {
		t.Errorf("Xid event %+v", ev)
	}
	f.events <- nvml.EventData{Device: f.Devices[5], EventType: nvml.EventTypeDoubleBitEccError}
	if ev := s.nextHealth(); ev.Index != 5 || ev.Reason != "uncorrectable ECC error" {
		t.Errorf("ECC event %+v", ev)
	}
	// An event for no device in particular applies to all of them.
	f.events <- nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	if ev := s.nextHealth(); ev.Index != -1 || ev.UUID != "" || ev.Xid != 48 {
		t.Errorf("all-device event %+v", ev)
	}
	// A device that NVML reports lost is reported once and no longer sampled.
	f.mu.Lock()
	f.lost[6] = true
	f.mu.Unlock()
	if ev := s.nextHealth(); ev.Index != 6 || ev.Reason != "GPU is lost" {
		t.Errorf("lost event %+v", ev)
	}
	for i := 0; i < 3; i++ {
		fr := s.next(gpu.FrameSamples)
		if len(fr.Samples) != 7 {
			t.Fatalf("after loss: %d samples, want 7", len(fr.Samples))
		}
	}
	if !strings.Contains(s.stderrString(), "application Xid") {
		t.Errorf("stderr lacks the ignored Xid:\n%s", s.stderrString())
	}

	s.stdin.Close()
	go io.Copy(io.Discard, s.stdout)
	select {
	case code := <-s.exit:
		if code != 0 {
			t.Errorf("exit %d after stdin closed", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not exit after stdin closed")
	}
}

func (s *session) stderrString() string { return s.stderr.String() }

func TestHelperNVMLUnavailable(t *testing.T) {
	f := newFakeDGX()
	f.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	s := startHelper(t, f, 20)
	fr := s.next(gpu.FrameError)
	if !fr.Fatal || !strings.Contains(fr.Error, "NVML init") {
		t.Errorf("error frame %+v", fr)
	}
	if code := <-s.exit; code != gpu.ExitUnavailable {
		t.Errorf("exit %d, want %d", code, gpu.ExitUnavailable)
	}
}

func TestHelperNoDevices(t *testing.T) {
	f := newFakeDGX()
	f.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	s := startHelper(t, f, 20)
	s.next(gpu.FrameHello)
	if d := s.next(gpu.FrameDevices); len(d.Devices) != 0 {
		t.Errorf("devices %+v", d.Devices)
	}
	if fr := s.next(gpu.FrameSamples); len(fr.Samples) != 0 {
		t.Errorf("samples %+v", fr.Samples)
	}
}

func TestProbe(t *testing.T) {
	f := newFakeDGX()
	var out, errw bytes.Buffer
	if code := probe(f, &out, &errw); code != 0 {
		t.Fatalf("probe exit %d: %s", code, errw.String())
	}
	var rep probeReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Driver != "550.54.15" || len(rep.Devices) != 8 || len(rep.Samples) != 8 || rep.Devices[0].Model != "A100" {
		t.Errorf("probe report %+v", rep)
	}
	f.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	errw.Reset()
	if code := probe(f, &out, &errw); code != gpu.ExitUnavailable || !strings.Contains(errw.String(), "NVML init") {
		t.Errorf("probe without driver: exit %d, %q", code, errw.String())
	}
}
