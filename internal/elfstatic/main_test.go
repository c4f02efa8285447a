package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func build(t *testing.T, cgo string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	// net with cgo links libc's resolver: dynamic when cgo is on.
	if err := os.WriteFile(src, []byte("package main\nimport \"net\"\nfunc main() { _, _ = net.LookupHost(\"localhost\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prog")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("go build with CGO_ENABLED=%s: %v: %s", cgo, err, b)
	}
	return out
}

func TestCheckStatic(t *testing.T) {
	if err := checkStatic(build(t, "0")); err != nil {
		t.Errorf("CGO_ENABLED=0 build: %v", err)
	}
	if _, err := exec.LookPath("gcc"); err == nil {
		if err := checkStatic(build(t, "1")); err == nil || !strings.Contains(err.Error(), "is not statically linked") {
			t.Errorf("cgo build: %v, want not statically linked", err)
		}
	}
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkStatic(notELF); err == nil || !strings.Contains(err.Error(), "not a readable ELF file") {
		t.Errorf("a script: %v", err)
	}
}
