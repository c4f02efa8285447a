package gpu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeup/nodeup/sched"
)

// Source says where a Supervisor's devices came from.
type Source string

// Sources, in the order Start tries them (Declared replaces all three).
const (
	SourceNVML     Source = "nvml"       // the NVML helper process
	SourceSMI      Source = "nvidia-smi" // parsing nvidia-smi output
	SourceNone     Source = "none"       // no GPUs found (or none declared)
	SourceDeclared Source = "declared"   // --num-gpus / --gpu-model, no detection
)

// Defaults for Config's zero values.
const (
	DefaultInterval     = 5 * time.Second
	DefaultStartTimeout = 20 * time.Second
	DefaultMinBackoff   = time.Second
	DefaultMaxBackoff   = time.Minute
)

// Config configures a Supervisor. The zero value detects GPUs with the
// embedded helper (when built in), then nvidia-smi from PATH, sampling every
// DefaultInterval.
type Config struct {
	// DataDir is the node's data dir; the embedded helper is written to
	// <DataDir>/bin/gpu-helper-<sha256>. Without it the helper is skipped.
	DataDir string
	// Logger receives the supervisor's logs; nil uses slog.Default().
	Logger *slog.Logger
	// Declare, when true, replaces detection with Declared (--num-gpus N
	// --gpu-model NAME). No helper or nvidia-smi is run, and there is no
	// telemetry.
	Declare bool
	// Declared are the declared devices (build them with the Declared
	// function); empty with Declare means "no GPUs", as --num-gpus 0.
	Declared []Device
	// Interval is how often telemetry is sampled (the helper's samples, or
	// one nvidia-smi run). Zero means DefaultInterval.
	Interval time.Duration
	// HangTimeout is how long a running helper may stay silent (no frame
	// at all; samples are its heartbeat) before it is killed and restarted,
	// and the limit for one nvidia-smi poll. Zero means 3×Interval + 5s.
	HangTimeout time.Duration
	// StartTimeout bounds each helper start until its device list arrives
	// (NVML init can take seconds), and the first nvidia-smi run. Zero
	// means DefaultStartTimeout.
	StartTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before restarting a crashed
	// or hung helper; the wait doubles from MinBackoff after each failure
	// and starts over after the helper has run 10 intervals (at least a
	// minute) without failing. Zero means DefaultMinBackoff/DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// HelperPath runs this program as the helper instead of the embedded
	// one (for tests and operators).
	HelperPath string
	// HelperArgs are the helper's command-line arguments (none by default).
	HelperArgs []string
	// HelperEnv are KEY=VALUE entries added to the node's environment for
	// the helper.
	HelperEnv []string
	// NoHelper skips the helper altogether (nvidia-smi, then none).
	NoHelper bool
	// SMIPath is the nvidia-smi to run ("" = nvidia-smi from PATH).
	SMIPath string
	// NoSMI skips the nvidia-smi fallback and polling.
	NoSMI bool
	// OnHealth, when set, is called once for every device whose health
	// changes (devices are only ever marked unhealthy: a bad device stays
	// out until the node restarts), after the Allocator and Resources
	// already reflect it. It runs on the supervisor's goroutine: return
	// quickly (re-read Resources, report to the leader in the background).
	OnHealth func(HealthEvent)
	// IsOwnProcess tells nodeup's own processes from others in telemetry
	// (Process.Foreign = !IsOwnProcess(pid)). nil: the node process and its
	// descendants (its workers) are nodeup's.
	IsOwnProcess func(pid int) bool
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.HangTimeout <= 0 {
		c.HangTimeout = 3*c.Interval + 5*time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = c.MinBackoff
	}
	if c.IsOwnProcess == nil {
		c.IsOwnProcess = isDescendant
	}
	return c
}

// Supervisor owns the node's GPU devices: it detects them once at Start,
// keeps the NVML helper running (restarting it with backoff when it crashes
// or hangs) or polls nvidia-smi, records the latest telemetry, and takes
// devices reported unhealthy out of its Allocator. The device set is fixed at
// Start; devices only ever leave it (become unhealthy). Methods are safe for
// concurrent use.
type Supervisor struct {
	cfg    Config
	log    *slog.Logger
	alloc  *Allocator
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	source   Source
	driver   string
	devices  []Device       // as detected, index order
	samples  map[int]Sample // latest per device index
	running  bool           // helper process up and talking
	restarts int            // helper restarts after crashes or hangs
	lastErr  string
}

// Status is a snapshot of a Supervisor, for `nodeup status`, the HTTP API
// and metrics.
type Status struct {
	// Source is where the devices came from.
	Source Source `json:"source"`
	// Driver is the NVIDIA driver version the helper reported ("" otherwise).
	Driver string `json:"driver,omitempty"`
	// HelperRunning is true while the NVML helper is up and talking.
	HelperRunning bool `json:"helper_running"`
	// HelperRestarts counts helper restarts after crashes and hangs.
	HelperRestarts int `json:"helper_restarts"`
	// LastError is the most recent helper or nvidia-smi failure, "" if none.
	LastError string `json:"last_error,omitempty"`
	// Devices are every device found at Start, in index order.
	Devices []DeviceStatus `json:"devices"`
}

// DeviceStatus is one device in a Status.
type DeviceStatus struct {
	Device
	// Healthy is false once the device was reported lost or broken.
	Healthy bool `json:"healthy"`
	// Reason says why the device is unhealthy; "" while healthy.
	Reason string `json:"reason,omitempty"`
	// GPU is the fraction live assignments reserve, fixed-point (0..1).
	GPU sched.Quantity `json:"gpu_reserved"`
	// MemoryBytes is the device memory live assignments reserve, in bytes.
	MemoryBytes uint64 `json:"memory_reserved_bytes"`
	// Leases is the number of live assignments holding the device.
	Leases int `json:"leases"`
	// Sample is the latest telemetry; nil before the first one (and always
	// for declared devices). Its At says how fresh it is: while the helper
	// is being restarted, samples age.
	Sample *Sample `json:"sample,omitempty"`
}

// Start detects the node's GPUs and, when they came from the helper or
// nvidia-smi, starts watching them; it returns once the device list is known
// (at most about StartTimeout for each of the helper and nvidia-smi).
// Detection failing is not an error: the node then has no GPUs and one log
// line says so. Stop ends the watching; cancelling ctx does too.
func Start(ctx context.Context, cfg Config) (*Supervisor, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(ctx)
	s := &Supervisor{cfg: cfg, log: cfg.Logger.With("component", "gpu"), cancel: cancel, done: make(chan struct{}), samples: map[int]Sample{}}
	if cfg.Declare {
		for i, d := range cfg.Declared {
			if slices.ContainsFunc(cfg.Declared[:i], func(o Device) bool { return o.Index == d.Index }) {
				cancel()
				return nil, fmt.Errorf("declared GPUs: index %d twice", d.Index)
			}
		}
		s.setDevices(SourceDeclared, cfg.Declared)
		close(s.done)
		if len(cfg.Declared) == 0 {
			s.log.Info("no GPUs on this node (declared --num-gpus 0)")
		} else {
			s.log.Info("GPUs declared, detection skipped", "count", len(cfg.Declared), "model", cfg.Declared[0].Model, "resources", s.Resources().String())
		}
		return s, nil
	}

	var why []any
	if path, err := s.helperPath(); err != nil {
		why = append(why, "nvml", err.Error())
	} else {
		ready := make(chan error, 1)
		helperDone := make(chan struct{})
		go func() {
			defer close(helperDone)
			if s.runHelper(ctx, path, ready) {
				s.pollSMI(ctx, false)
			}
		}()
		err := <-ready
		if err == nil {
			s.done = helperDone
			return s, nil
		}
		why = append(why, "nvml", err.Error())
		<-helperDone
	}

	if !cfg.NoSMI {
		sctx, scancel := context.WithTimeout(ctx, cfg.StartTimeout)
		res, err := QuerySMI(sctx, cfg.SMIPath)
		scancel()
		switch {
		case err != nil:
			why = append(why, "nvidia-smi", err.Error())
		case len(res.Devices) == 0:
			why = append(why, "nvidia-smi", "no devices")
		default:
			s.setDevices(SourceSMI, res.Devices)
			s.storeSamples(res.Samples)
			s.log.Info("GPUs found with nvidia-smi", append([]any{"count", len(res.Devices), "resources", s.Resources().String()}, why...)...)
			go func() {
				defer close(s.done)
				s.pollSMI(ctx, true)
			}()
			return s, nil
		}
	} else {
		why = append(why, "nvidia-smi", "disabled")
	}
	s.setDevices(SourceNone, nil)
	close(s.done)
	s.log.Info("no GPUs on this node", why...)
	return s, nil
}

// Stop stops the helper (closing its stdin, then killing it after a grace
// period) or the nvidia-smi polling, and waits for that. Device state and
// the Allocator stay usable. Safe to call more than once.
func (s *Supervisor) Stop() {
	s.cancel()
	<-s.done
}

// Allocator returns the allocator over this node's devices; unhealthy
// devices are taken out of it as they are reported.
func (s *Supervisor) Allocator() *Allocator { return s.alloc }

// Source returns where the devices came from.
func (s *Supervisor) Source() Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.source
}

// Resources returns the GPU resources the node offers now:
// Resources(healthy devices), i.e. GPU, accelerator_type:<model> and
// gpu_memory. Empty for a node without (healthy) GPUs.
func (s *Supervisor) Resources() sched.ResourceSet { return s.alloc.Total() }

// Status returns a snapshot of devices, health, reservations and the latest
// telemetry.
func (s *Supervisor) Status() Status {
	usage := s.alloc.Devices()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Source: s.source, Driver: s.driver, HelperRunning: s.running, HelperRestarts: s.restarts, LastError: s.lastErr}
	for _, u := range usage {
		ds := DeviceStatus{Device: u.Device, Healthy: u.Healthy, Reason: u.Reason, GPU: u.GPU, MemoryBytes: u.MemoryBytes, Leases: u.Leases}
		if smp, ok := s.samples[u.Device.Index]; ok {
			smp.Processes = slices.Clone(smp.Processes)
			ds.Sample = &smp
		}
		st.Devices = append(st.Devices, ds)
	}
	return st
}

func (s *Supervisor) setDevices(src Source, devs []Device) {
	s.mu.Lock()
	s.source = src
	s.devices = slices.Clone(devs)
	s.mu.Unlock()
	s.alloc = NewAllocator(devs)
}

func (s *Supervisor) helperPath() (string, error) {
	switch {
	case s.cfg.NoHelper:
		return "", errors.New("helper disabled")
	case s.cfg.HelperPath != "":
		return s.cfg.HelperPath, nil
	case !HelperEmbedded():
		return "", ErrNoHelper
	}
	return ExtractHelper(s.cfg.DataDir)
}

// names reports whether a device named by the helper or nvidia-smi (index
// and UUID) is d: by UUID when there is one, since indices can shift when a
// device disappears.
func (d Device) names(index int, uuid string) bool {
	return uuid != "" && d.UUID == uuid || uuid == "" && d.Index == index
}

// resolve maps a device named by the helper or nvidia-smi (index and UUID)
// to the index it had at Start.
func (s *Supervisor) resolve(index int, uuid string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.names(index, uuid) {
			return d.Index, true
		}
	}
	return 0, false
}

func (s *Supervisor) storeSamples(samples []Sample) {
	for _, smp := range samples {
		idx, ok := s.resolve(smp.Index, smp.UUID)
		if !ok {
			continue
		}
		smp.Index = idx
		smp.Processes = slices.Clone(smp.Processes)
		for i := range smp.Processes {
			smp.Processes[i].Foreign = !s.cfg.IsOwnProcess(smp.Processes[i].PID)
		}
		s.mu.Lock()
		s.samples[idx] = smp
		s.mu.Unlock()
	}
}

// markUnhealthy takes a device (index -1: all) out of scheduling, logs it
// and calls OnHealth, once per device that changes.
func (s *Supervisor) markUnhealthy(ev HealthEvent) {
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	var targets []Device
	s.mu.Lock()
	for _, d := range s.devices {
		if ev.Index == -1 && ev.UUID == "" || d.names(ev.Index, ev.UUID) {
			targets = append(targets, d)
		}
	}
	s.mu.Unlock()
	for _, d := range targets {
		if !s.alloc.SetHealth(d.Index, false, ev.Reason) {
			continue
		}
		e := ev
		e.Index, e.UUID, e.Healthy = d.Index, d.UUID, false
		s.log.Warn("GPU unhealthy, taken out of scheduling", "index", d.Index, "uuid", d.UUID, "model", d.Model, "reason", e.Reason)
		if s.cfg.OnHealth != nil {
			s.cfg.OnHealth(e)
		}
	}
}

func (s *Supervisor) setRunning(running bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = running
	if err != nil {
		s.lastErr = err.Error()
	}
}

// errUnavailable marks a helper outcome after which restarting is useless:
// it could not start, or said NVML cannot work here.
type errUnavailable struct{ err error }

// Error returns the wrapped error's text.
func (e errUnavailable) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e errUnavailable) Unwrap() error { return e.err }

// runHelper runs the helper until ctx ends, restarting it with backoff after
// crashes and hangs. The outcome of the first start goes to ready: nil once
// its device list is in (devices are then set), else the error, and then
// runHelper returns at once. It returns true when the helper later turned
// out to be unavailable, so the caller should poll nvidia-smi instead.
func (s *Supervisor) runHelper(ctx context.Context, path string, ready chan<- error) (fallback bool) {
	backoff := s.cfg.MinBackoff
	first := true
	for {
		started := time.Now()
		err := s.attempt(ctx, path, first, ready)
		if first {
			if !s.devicesKnown() {
				return false // attempt already reported err on ready
			}
			first = false
		}
		if ctx.Err() != nil {
			return false
		}
		var unavail errUnavailable
		if errors.As(err, &unavail) {
			s.log.Warn("GPU helper unavailable; falling back to nvidia-smi for telemetry, keeping the known devices", "err", err)
			return true
		}
		if time.Since(started) >= max(10*s.cfg.Interval, time.Minute) {
			backoff = s.cfg.MinBackoff
		}
		s.mu.Lock()
		s.restarts++
		n := s.restarts
		s.mu.Unlock()
		s.log.Warn("GPU helper failed; restarting it, scheduling continues on the last known healthy devices", "err", err, "restart", n, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

func (s *Supervisor) devicesKnown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.source == SourceNVML
}

// attempt runs one helper process until it exits, hangs, or ctx ends.
func (s *Supervisor) attempt(ctx context.Context, path string, first bool, ready chan<- error) (err error) {
	fail := func(e error) error {
		if first {
			ready <- e
		}
		return e
	}
	cmd := exec.Command(path, s.cfg.HelperArgs...)
	cmd.Env = append(os.Environ(), s.cfg.HelperEnv...)
	setProcAttr(cmd)
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fail(errUnavailable{err})
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(errUnavailable{err})
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fail(errUnavailable{err})
	}
	if err := cmd.Start(); err != nil {
		// Missing file, no permission, no ELF interpreter (no glibc): the
		// helper cannot run on this machine.
		return fail(errUnavailable{fmt.Errorf("start GPU helper %s: %w", path, err)})
	}
	pid := cmd.Process.Pid
	log := s.log.With("helper_pid", pid)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.Info("gpu-helper: " + sc.Text())
		}
	}()
	frames := make(chan *Frame)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		defer wg.Done()
		for {
			f, err := ReadFrame(stdout)
			if err != nil {
				readErr <- err
				return
			}
			select {
			case frames <- f:
			case <-stop:
				return
			}
		}
	}()

	var fatal string
	defer func() {
		close(stop)
		stdin.Close() // tells the helper to exit
		exited := make(chan struct{})
		go func() {
			select {
			case <-exited:
			case <-time.After(2 * time.Second):
				_ = cmd.Process.Kill()
			}
		}()
		werr := cmd.Wait()
		close(exited)
		wg.Wait()
		s.setRunning(false, err)
		if ctx.Err() != nil {
			err = ctx.Err()
			if first && !s.devicesKnown() {
				ready <- err
			}
			return
		}
		if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == ExitUnavailable {
			msg := fatal
			if msg == "" {
				msg = "exit status 3"
			}
			err = errUnavailable{fmt.Errorf("GPU helper: %s", msg)}
		} else if werr != nil && err != nil {
			err = fmt.Errorf("%w (%v)", err, werr)
		}
		if first && !s.devicesKnown() {
			ready <- err
		}
	}()

	if err := WriteFrame(stdin, &Frame{Type: FrameHello, Version: ProtocolVersion, IntervalMS: s.cfg.Interval.Milliseconds()}); err != nil {
		return fmt.Errorf("write hello to GPU helper: %w", err)
	}
	// Until its device list is in, the helper gets StartTimeout (NVML init
	// takes seconds on big machines without persistence mode); after that
	// it must send a frame at least every HangTimeout.
	limit := s.cfg.StartTimeout
	tick := time.NewTicker(min(s.cfg.StartTimeout/4, s.cfg.HangTimeout/4, time.Second))
	defer tick.Stop()
	last := time.Now()
	gotHello := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			if err == io.EOF || errors.Is(err, os.ErrClosed) {
				return errors.New("GPU helper exited")
			}
			return fmt.Errorf("GPU helper stream: %w", err)
		case <-tick.C:
			if silent := time.Since(last); silent > limit {
				_ = cmd.Process.Kill()
				return fmt.Errorf("GPU helper hung: no frame for %s, killed", silent.Round(time.Millisecond))
			}
		case f := <-frames:
			last = time.Now()
			switch f.Type {
			case FrameHello:
				if f.Version != ProtocolVersion {
					fatal = fmt.Sprintf("protocol version %d, want %d", f.Version, ProtocolVersion)
					return errUnavailable{fmt.Errorf("GPU helper speaks %s", fatal)}
				}
				gotHello = true
				s.mu.Lock()
				s.driver = f.Driver
				s.mu.Unlock()
			case FrameDevices:
				if !gotHello {
					return errors.New("GPU helper sent devices before hello")
				}
				if first {
					if len(f.Devices) == 0 {
						return errUnavailable{errors.New("NVML found no devices")}
					}
					s.setDevices(SourceNVML, f.Devices)
					s.setRunning(true, nil)
					log.Info("GPUs found with NVML", "count", len(f.Devices), "driver", f.Driver, "resources", s.Resources().String())
					ready <- nil
				} else {
					s.reconcile(f.Devices)
					s.setRunning(true, nil)
					log.Info("GPU helper restarted")
				}
				limit = s.cfg.HangTimeout
			case FrameSamples:
				s.storeSamples(f.Samples)
			case FrameHealth:
				for _, ev := range f.Health {
					if !ev.Healthy {
						s.markUnhealthy(ev)
					}
				}
			case FrameError:
				if f.Fatal {
					fatal = f.Error
					return errUnavailable{fmt.Errorf("GPU helper: %s", f.Error)}
				}
				log.Warn("GPU helper error", "err", f.Error)
			default:
				log.Warn("GPU helper sent an unknown frame; ignored", "type", string(f.Type))
			}
		}
	}
}

// reconcile compares a restarted helper's device list with the one from
// Start: a device no longer listed is marked unhealthy; a new device is
// logged and ignored until the node restarts.
func (s *Supervisor) reconcile(now []Device) {
	s.markMissing(now, "missing after GPU helper restart")
	for _, n := range now {
		if _, known := s.resolve(n.Index, n.UUID); !known {
			s.log.Warn("new GPU appeared; restart the node to use it", "index", n.Index, "uuid", n.UUID, "name", n.Name)
		}
	}
}

// markMissing marks unhealthy, for reason, every device found at Start that
// listed (a restarted helper's or a later nvidia-smi run's devices) lacks.
func (s *Supervisor) markMissing(listed []Device, reason string) {
	s.mu.Lock()
	known := slices.Clone(s.devices)
	s.mu.Unlock()
	for _, d := range known {
		if !slices.ContainsFunc(listed, func(n Device) bool { return n.UUID == d.UUID }) {
			s.markUnhealthy(HealthEvent{Index: d.Index, UUID: d.UUID, Reason: reason})
		}
	}
}

// pollSMI samples telemetry with nvidia-smi every Interval until ctx ends.
// A device that a successful run no longer lists is marked unhealthy; a
// failed run is logged (once per distinct error) and changes nothing.
func (s *Supervisor) pollSMI(ctx context.Context, started bool) {
	if s.cfg.NoSMI {
		return
	}
	if !started {
		s.mu.Lock()
		s.source = SourceSMI
		s.mu.Unlock()
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, max(s.cfg.HangTimeout, s.cfg.Interval))
		res, err := QuerySMI(rctx, s.cfg.SMIPath)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if err.Error() != lastErr {
				s.log.Warn("nvidia-smi failed; keeping the last known devices", "err", err)
				lastErr = err.Error()
				s.setRunning(false, err)
			}
			continue
		}
		lastErr = ""
		s.storeSamples(res.Samples)
		reason := "missing from nvidia-smi output"
		if len(res.Problems) > 0 {
			reason += ": " + strings.Join(res.Problems, "; ")
		}
		s.markMissing(res.Devices, reason)
	}
}
