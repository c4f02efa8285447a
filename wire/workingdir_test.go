package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
)

// A manifest's encoded form parses back to itself, and its hash is the
// sha256 of that form, so it is stored and fetched as a chunk.
func TestJobManifestEncodeParseHash(t *testing.T) {
	m := &JobManifest{Size: MaxJobChunkBytes + 5, Chunks: []string{strings.Repeat("a", 64), strings.Repeat("b", 64)}}
	enc := m.Encode()
	if want := "1048581\n" + strings.Repeat("a", 64) + "\n" + strings.Repeat("b", 64) + "\n"; string(enc) != want {
		t.Fatalf("Encode = %q, want %q", enc, want)
	}
	sum := sha256.Sum256(enc)
	if m.Hash() != hex.EncodeToString(sum[:]) {
		t.Fatalf("Hash %s is not the sha256 of Encode", m.Hash())
	}
	got, err := ParseJobManifest(enc)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("ParseJobManifest(Encode(m)) = %+v, %v; want %+v", got, err, m)
	}
	if got, err := ParseJobManifest([]byte("0\n")); err != nil || got.Size != 0 || len(got.Chunks) != 0 {
		t.Fatalf("the empty archive's manifest: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "5", "-1\n", "+5\n", "05\n", "x\n", "5\nnot-a-hash\n", "5\n" + strings.Repeat("A", 64) + "\n",
		"5\n" + strings.Repeat("a", 64), "5\n\n", strings.Repeat("9", 30) + "\n"} {
		if _, err := ParseJobManifest([]byte(bad)); err == nil {
			t.Errorf("ParseJobManifest(%q) accepted", bad)
		}
	}
	if _, err := ParseJobManifest(make([]byte, MaxJobChunkBytes+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("an oversized manifest: %v, want it refused with the cap", err)
	}
}

// A working dir ref is "<64 hex>@host:port" and nothing else; it is the one
// NODEUP_* key a runtime env may carry.
func TestWorkingDirRef(t *testing.T) {
	h := strings.Repeat("c", 64)
	ref := FormatWorkingDirRef(h, "10.0.0.1:7370")
	if gh, holder, err := ParseWorkingDirRef(ref); err != nil || gh != h || holder != "10.0.0.1:7370" {
		t.Fatalf("ParseWorkingDirRef(%q) = %q, %q, %v", ref, gh, holder, err)
	}
	for _, bad := range []string{"", h, h + "@", "../x@n:1", h + "@host", h + "@a:1@b:2", h + "@unix:///sock", h + "@" + strings.Repeat("h", 300) + ":1", strings.ToUpper(h) + "@n:1"} {
		if _, _, err := ParseWorkingDirRef(bad); err == nil {
			t.Errorf("ParseWorkingDirRef(%q) accepted", bad)
		}
	}
	if err := ValidateEnvVar(EnvWorkingDir, ref); err != nil {
		t.Errorf("a runtime env with a working dir ref: %v", err)
	}
	if err := ValidateEnvVar(EnvWorkingDir, "/etc"); err == nil {
		t.Error("a runtime env whose working dir is a path, not a ref, was accepted")
	}
	if err := ValidateEnvVar("NODEUP_JOB_ID", "x"); err == nil {
		t.Error("another NODEUP_* key was accepted")
	}
}

// Whatever a peer sends as a manifest, parsing returns an error or a
// manifest of well-formed hashes; it never panics.
func FuzzParseJobManifest(f *testing.F) {
	f.Add([]byte("5\n" + strings.Repeat("a", 64) + "\n"))
	f.Add([]byte("0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseJobManifest(b)
		if err != nil {
			return
		}
		for _, c := range m.Chunks {
			if CheckChunkHash(c) != nil {
				t.Fatalf("parsed a bad chunk hash %q", c)
			}
		}
		if string(m.Encode()) != string(b) {
			t.Fatalf("%q parsed to a manifest that encodes to %q", b, m.Encode())
		}
	})
}

// A runtime env's py_executable is a clean absolute path; anything else
// (relative, dotted, NUL, too long) is refused naming it.
func TestValidatePyExecutable(t *testing.T) {
	if err := ValidateEnvVar(EnvPyExecutable, "/usr/bin/python3"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "python3", "./python3", "/usr/../bin/sh", "/usr/bin//python3", "/usr/bin/python3\x00", "/" + strings.Repeat("a", 5000)} {
		if err := ValidateEnvVar(EnvPyExecutable, bad); err == nil || !strings.Contains(err.Error(), "py_executable") {
			t.Errorf("py_executable %q: %v, want refused naming py_executable", bad, err)
		}
	}
}
