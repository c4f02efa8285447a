package gpu

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"unsafe"
)

// ErrNoHelper is returned by ExtractHelper when this binary was built
// without the NVML helper (no gcc at build time, or a plain go build).
var ErrNoHelper = errors.New("GPU helper not built into this binary")

// HelperEmbedded reports whether this binary carries the NVML helper.
func HelperEmbedded() bool { return len(embeddedHelper) > 0 }

// embeddedStart is where the go:embed helper's bytes lie: in the binary's
// read-only data, mapped from the executable file. Only those pages are
// ever given back with releaseImage (tests swap in other strings).
var embeddedStart = unsafe.StringData(embeddedHelper)

// helperImage views the helper's bytes without copying them (a copy would
// put several MiB on the heap). Nothing writes to the view.
func helperImage() []byte {
	return unsafe.Slice(unsafe.StringData(embeddedHelper), len(embeddedHelper))
}

// releaseHelperImage gives the embedded helper's pages back to the kernel
// after they were read (hashed, written out): they are clean pages of the
// executable, so the node keeps no resident copy of a helper it only
// writes to disk, and a later read faults them in again from the file.
func releaseHelperImage() {
	if len(embeddedHelper) > 0 && unsafe.StringData(embeddedHelper) == embeddedStart {
		releaseImage(helperImage())
	}
}

// helperSum returns the hex sha256 of embeddedHelper, computed once.
var helperSum = onceSum()

func onceSum() func() string {
	return sync.OnceValue(func() string {
		s := sha256.Sum256(helperImage())
		return hex.EncodeToString(s[:])
	})
}

// ExtractHelper writes the embedded NVML helper to
// <dataDir>/bin/gpu-helper-<sha256 of its bytes> (mode 0755) unless a file
// with exactly those bytes is already there, and returns its path. A file
// with the right name but other bytes (truncated, tampered) is replaced;
// writing goes through a temporary file and a rename, so a concurrent reader
// never sees half a helper. It returns ErrNoHelper when none is embedded.
// The embedded bytes are not kept resident afterwards (releaseHelperImage).
func ExtractHelper(dataDir string) (string, error) {
	if !HelperEmbedded() {
		return "", ErrNoHelper
	}
	if dataDir == "" {
		return "", errors.New("extract GPU helper: no data dir")
	}
	defer releaseHelperImage()
	sum := helperSum()
	dir := filepath.Join(dataDir, "bin")
	path := filepath.Join(dir, "gpu-helper-"+sum)
	if fileSHA256(path) == sum {
		return path, nil
	}
	if err := writeExecutable(dir, path, helperImage()); err != nil {
		return "", fmt.Errorf("extract GPU helper: %w", err)
	}
	return path, nil
}

// writeExecutable writes b to path (in dir, created if missing) with mode
// 0755, through a synced temporary file in dir renamed over path.
func writeExecutable(dir, path string, b []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".gpu-helper-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// fileSHA256 returns the hex sha256 of the file at path, "" when unreadable.
// It streams the file rather than reading it whole onto the heap.
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
