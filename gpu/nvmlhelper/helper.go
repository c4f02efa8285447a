//go:build cgo

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nodeup/nodeup/gpu"
)

// applicationXids are Xid errors caused by an application (illegal memory
// access, a killed context, ...), not by the device; they do not make a
// device unhealthy. The list is the NVIDIA Kubernetes device plugin's
// default (Xids 13, 31, 43, 45, 68, 109).
var applicationXids = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// healthEvents are the NVML event types the helper watches: critical Xid
// errors and uncorrectable (double-bit) ECC errors, plus "GPU unavailable"
// on drivers that report it. Each is masked by what the device supports.
const healthEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeGpuUnavailableError

// notAvailable is NVML_VALUE_NOT_AVAILABLE, reported for a process's memory
// when NVML cannot tell it.
const notAvailable = ^uint64(0)

// device is one GPU the helper watches.
type device struct {
	info   gpu.Device
	handle nvml.Device
	lost   bool // reported lost once; never reported again
}

// helper holds the state of one run.
type helper struct {
	lib  nvml.Interface
	log  *slog.Logger
	wmu  sync.Mutex // serializes frames on out
	out  io.Writer
	dmu  sync.Mutex // guards devs[i].lost
	devs []*device
}

// run is the helper: it reads the node's hello from in, initializes NVML
// through lib, and writes frames to out until in is closed (exit status 0)
// or writing fails (1). NVML failing to initialize is a fatal error frame
// and status gpu.ExitUnavailable. Logs go to logw.
func run(lib nvml.Interface, in io.Reader, out io.Writer, logw io.Writer) int {
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	hello, err := gpu.ReadFrame(in)
	if err != nil {
		log.Error("no hello from the node", "err", err)
		return 1
	}
	h := &helper{lib: lib, log: log, out: out}
	if hello.Type != gpu.FrameHello || hello.Version != gpu.ProtocolVersion {
		_ = h.send(&gpu.Frame{Type: gpu.FrameError, Fatal: true, Error: fmt.Sprintf("expected hello version %d, got %s version %d", gpu.ProtocolVersion, hello.Type, hello.Version)})
		return gpu.ExitUnavailable
	}
	interval := time.Duration(hello.IntervalMS) * time.Millisecond
	if interval <= 0 {
		interval = gpu.DefaultInterval
	}

	if ret := lib.Init(); ret != nvml.SUCCESS {
		_ = h.send(&gpu.Frame{Type: gpu.FrameError, Fatal: true, Error: "NVML init: " + errString(ret)})
		return gpu.ExitUnavailable
	}
	defer lib.Shutdown()

	driver, _ := lib.SystemGetDriverVersion()
	nvmlVersion, _ := lib.SystemGetNVMLVersion()
	if err := h.send(&gpu.Frame{Type: gpu.FrameHello, Version: gpu.ProtocolVersion, Driver: driver, NVML: nvmlVersion}); err != nil {
		return 1
	}
	h.devs = h.discover()
	if err := h.send(&gpu.Frame{Type: gpu.FrameDevices, Devices: h.infos()}); err != nil {
		return 1
	}

	done := make(chan struct{})
	go func() {
		// The node never sends more than its hello; EOF means stop.
		_, _ = io.Copy(io.Discard, in)
		close(done)
	}()
	var wg sync.WaitGroup
	if len(h.devs) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.watchEvents(done)
		}()
	}
	defer wg.Wait()

	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := h.send(&gpu.Frame{Type: gpu.FrameSamples, Samples: h.sample()}); err != nil {
			log.Error("write samples", "err", err)
			return 1
		}
		select {
		case <-done:
			return 0
		case <-t.C:
		}
	}
}

func (h *helper) send(f *gpu.Frame) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return gpu.WriteFrame(h.out, f)
}

// errString describes an NVML return code (nvml.Return.Error works even
// when the library could not be loaded).
func errString(ret nvml.Return) string {
	if s := ret.Error(); s != "" {
		return s
	}
	return fmt.Sprintf("NVML return %d", int32(ret))
}

// discover lists the devices NVML can open, in index order. A device NVML
// cannot open or name is logged and left out.
func (h *helper) discover() []*device {
	n, ret := h.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		h.log.Error("NVML device count", "err", errString(ret))
		return nil
	}
	var devs []*device
	for i := 0; i < n; i++ {
		d, ret := h.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			h.log.Error("NVML device handle", "index", i, "err", errString(ret))
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			h.log.Error("NVML device UUID", "index", i, "err", errString(ret))
			continue
		}
		name, ret := d.GetName()
		if ret != nvml.SUCCESS {
			name = ""
		}
		info := gpu.Device{Index: i, UUID: uuid, Name: name, Model: gpu.ShortModel(name)}
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			info.MemoryBytes = mem.Total
		}
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			info.PCIBusID = cString(pci.BusId[:])
		}
		devs = append(devs, &device{info: info, handle: d})
	}
	return devs
}

// infos returns what the node is told about the watched devices, in order.
func (h *helper) infos() []gpu.Device {
	infos := make([]gpu.Device, len(h.devs))
	for i, d := range h.devs {
		infos[i] = d.info
	}
	return infos
}

// cString converts a NUL-terminated C char array.
func cString[T int8 | uint8](b []T) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// sample reads every device once. A value NVML does not support reads as
// gpu.Unknown; a device NVML reports lost is sent as unhealthy (once) and
// left out of the samples.
func (h *helper) sample() []gpu.Sample {
	now := time.Now()
	samples := []gpu.Sample{}
	for _, d := range h.devs {
		h.dmu.Lock()
		lost := d.lost
		h.dmu.Unlock()
		if lost {
			continue
		}
		s := gpu.Sample{Index: d.info.Index, UUID: d.info.UUID, At: now,
			UtilizationPercent: gpu.Unknown, MemoryUsedBytes: gpu.Unknown, MemoryTotalBytes: d.info.MemoryBytes,
			TemperatureC: gpu.Unknown, PowerWatts: -1}
		mem, ret := d.handle.GetMemoryInfo()
		if ret == nvml.ERROR_GPU_IS_LOST {
			h.markLost(d, "GPU is lost")
			continue
		}
		if ret == nvml.SUCCESS {
			s.MemoryUsedBytes, s.MemoryTotalBytes = int64(mem.Used), mem.Total
		}
		if u, ret := d.handle.GetUtilizationRates(); ret == nvml.SUCCESS {
			s.UtilizationPercent = int(u.Gpu)
		}
		if c, ret := d.handle.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			s.TemperatureC = int(c)
		}
		if mw, ret := d.handle.GetPowerUsage(); ret == nvml.SUCCESS {
			s.PowerWatts = float64(mw) / 1000
		}
		s.Processes = h.processes(d)
		samples = append(samples, s)
	}
	return samples
}

// processes lists compute and graphics processes on d, each PID once.
func (h *helper) processes(d *device) []gpu.Process {
	var procs []gpu.Process
	for _, get := range []func() ([]nvml.ProcessInfo, nvml.Return){d.handle.GetComputeRunningProcesses, d.handle.GetGraphicsRunningProcesses} {
		infos, ret := get()
		if ret != nvml.SUCCESS {
			continue
		}
		for _, p := range infos {
			if slices.ContainsFunc(procs, func(q gpu.Process) bool { return q.PID == int(p.Pid) }) {
				continue
			}
			mem := int64(gpu.Unknown)
			if p.UsedGpuMemory != notAvailable {
				mem = int64(p.UsedGpuMemory)
			}
			procs = append(procs, gpu.Process{PID: int(p.Pid), UsedMemoryBytes: mem})
		}
	}
	return procs
}

// markLost reports d unhealthy once.
func (h *helper) markLost(d *device, reason string) {
	h.dmu.Lock()
	already := d.lost
	d.lost = true
	h.dmu.Unlock()
	if already {
		return
	}
	h.log.Warn("GPU unhealthy", "index", d.info.Index, "uuid", d.info.UUID, "reason", reason)
	_ = h.send(&gpu.Frame{Type: gpu.FrameHealth, Health: []gpu.HealthEvent{{Index: d.info.Index, UUID: d.info.UUID, Reason: reason, At: time.Now()}}})
}

// watchEvents registers every device for health events and reports them
// until done closes. Devices that support none are watched by sampling
// alone (a lost GPU still shows there).
func (h *helper) watchEvents(done <-chan struct{}) {
	set, ret := h.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		h.log.Warn("NVML events unavailable; health comes from sampling only", "err", errString(ret))
		return
	}
	defer set.Free()
	registered := 0
	for _, d := range h.devs {
		supported, ret := d.handle.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			h.log.Warn("NVML supported events", "index", d.info.Index, "err", errString(ret))
			continue
		}
		mask := supported & healthEvents
		if mask == 0 {
			continue
		}
		if ret := d.handle.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			h.log.Warn("NVML register events", "index", d.info.Index, "err", errString(ret))
			continue
		}
		registered++
	}
	if registered == 0 {
		return
	}
	for {
		select {
		case <-done:
			return
		default:
		}
		ev, ret := set.Wait(500)
		switch ret {
		case nvml.SUCCESS:
			h.handleEvent(ev)
		case nvml.ERROR_TIMEOUT:
		default:
			// GPU lost or driver trouble: sampling reports lost devices;
			// do not spin.
			h.log.Warn("NVML event wait", "err", errString(ret))
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// handleEvent turns one NVML event into a health frame, or ignores it
// (application Xids, event types that are not health problems).
func (h *helper) handleEvent(ev nvml.EventData) {
	var reason string
	var xid uint64
	switch {
	case ev.EventType&nvml.EventTypeXidCriticalError != 0:
		xid = ev.EventData
		if applicationXids[xid] {
			h.log.Warn("application Xid, device stays healthy", "xid", xid)
			return
		}
		reason = fmt.Sprintf("Xid %d (critical)", xid)
	case ev.EventType&nvml.EventTypeDoubleBitEccError != 0:
		reason = "uncorrectable ECC error"
	case ev.EventType&nvml.EventTypeGpuUnavailableError != 0:
		reason = "GPU unavailable"
	default:
		return
	}
	he := gpu.HealthEvent{Index: -1, Reason: reason, Xid: xid, At: time.Now()}
	if ev.Device != nil {
		uuid, ret := ev.Device.GetUUID()
		if ret != nvml.SUCCESS {
			return
		}
		for _, d := range h.devs {
			if d.info.UUID == uuid {
				he.Index, he.UUID = d.info.Index, uuid
			}
		}
		if he.UUID == "" {
			return
		}
	}
	h.log.Warn("GPU unhealthy", "index", he.Index, "uuid", he.UUID, "reason", reason)
	_ = h.send(&gpu.Frame{Type: gpu.FrameHealth, Health: []gpu.HealthEvent{he}})
}

// probeReport is what --probe prints.
type probeReport struct {
	Driver  string       `json:"driver"`
	NVML    string       `json:"nvml"`
	Devices []gpu.Device `json:"devices"`
	Samples []gpu.Sample `json:"samples"`
}

// probe initializes NVML through lib, prints the driver, the devices and one
// sample of each as indented JSON to out, and returns the exit status: 0, or
// gpu.ExitUnavailable when NVML cannot be initialized (said on errw).
func probe(lib nvml.Interface, out, errw io.Writer) int {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Fprintln(errw, "gpu-helper: NVML init:", errString(ret))
		return gpu.ExitUnavailable
	}
	defer lib.Shutdown()
	h := &helper{lib: lib, log: slog.New(slog.NewTextHandler(errw, nil)), out: io.Discard}
	h.devs = h.discover()
	rep := probeReport{Devices: h.infos(), Samples: h.sample()}
	rep.Driver, _ = lib.SystemGetDriverVersion()
	rep.NVML, _ = lib.SystemGetNVMLVersion()
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintln(errw, "gpu-helper:", err)
		return 1
	}
	return 0
}
