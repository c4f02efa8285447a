//go:build cgo

package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/sched"
)

// TestRealHelperUnderSupervisor builds the real helper and runs it under a
// gpu.Supervisor on this machine. Without an NVIDIA driver (CI) NVML fails
// to load, the helper says so and exits 3, and the node ends with no GPUs;
// on a GPU node it must find them through NVML and sample them.
func TestRealHelperUnderSupervisor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the helper")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain in PATH")
	}
	bin := filepath.Join(t.TempDir(), "gpu-helper")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Env = append(build.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build helper: %v\n%s", err, out)
	}
	var logs bytes.Buffer
	s, err := gpu.Start(context.Background(), gpu.Config{
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
		HelperPath: bin,
		NoSMI:      true,
		Interval:   200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	switch s.Source() {
	case gpu.SourceNone:
		if !strings.Contains(logs.String(), "NVML init") {
			t.Errorf("no GPUs, but the log does not say NVML failed:\n%s", logs.String())
		}
		t.Logf("no NVIDIA driver here: %s", strings.TrimSpace(logs.String()))
	case gpu.SourceNVML:
		if s.Resources()[sched.GPU] <= 0 {
			t.Fatalf("NVML found no GPUs: %+v", s.Status())
		}
		testutil.Until(t, 10*time.Second, "telemetry from the real helper", func() error {
			if s.Status().Devices[0].Sample == nil {
				return errors.New("no sample")
			}
			return nil
		})
		t.Logf("real GPUs: %s; status %+v", s.Resources(), s.Status())
	default:
		t.Fatalf("source %s; logs:\n%s", s.Source(), logs.String())
	}
}
