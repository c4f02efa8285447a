package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// A working dir as a runtime env (Ray's runtime_env working_dir): every
// worker process of the task or actor starts in the dir unpacked on its
// node. It travels in the runtime env vars (LeaseRequest.EnvVars,
// ActorCreateRequest.EnvVars) under EnvWorkingDir as a WorkingDirRef, so it
// is inherited, merged and kept with an actor's record exactly as the env
// vars are; a node fetches what it lacks from the holder the ref names, or
// from any other node.

// EnvWorkingDir is the runtime env key (and the worker process variable)
// holding a working dir's ref, "<manifest sha256>@<host:port of a node
// that holds it>" (FormatWorkingDirRef). A submitted job's entrypoint gets
// it too when the job has a working dir, so a driver run as a job gives
// its tasks and actors the same dir.
const EnvWorkingDir = "NODEUP_WORKING_DIR"

// maxHolderAddr bounds the holder part of a working dir ref.
const maxHolderAddr = 256

// Encode returns m's canonical form: its size in decimal, then each chunk's
// hash, each on its own line. Its sha256 is m's content address (Hash), so
// an encoded manifest is stored and fetched as a chunk like the archive's
// own (Job.Upload, Job.Chunk).
func (m *JobManifest) Encode() []byte {
	var b bytes.Buffer
	b.Grow(21 + 65*len(m.Chunks))
	b.WriteString(strconv.FormatInt(m.Size, 10))
	b.WriteByte('\n')
	for _, c := range m.Chunks {
		b.WriteString(c)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Hash is m's content address: the sha256 (hex) of Encode.
func (m *JobManifest) Hash() string {
	sum := sha256.Sum256(m.Encode())
	return hex.EncodeToString(sum[:])
}

// ParseJobManifest parses Encode's form (at most MaxJobChunkBytes, as any
// chunk). Errors name what is malformed: a size that is not a
// non-negative decimal, a line that is not a chunk hash, more than
// MaxJobChunks chunks, or no final newline. It does not check that the
// chunk count fits the size; the node does, against its cap.
func ParseJobManifest(b []byte) (*JobManifest, error) {
	if len(b) > MaxJobChunkBytes {
		return nil, fmt.Errorf("manifest of %d bytes: at most %d", len(b), MaxJobChunkBytes)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("manifest: want lines ending in a newline")
	}
	lines := strings.Split(string(b[:len(b)-1]), "\n")
	size, err := strconv.ParseInt(lines[0], 10, 64)
	if err != nil || size < 0 || lines[0] != strconv.FormatInt(size, 10) {
		return nil, fmt.Errorf("manifest size %q: want a non-negative decimal", truncateString(lines[0], 32))
	}
	if len(lines)-1 > MaxJobChunks {
		return nil, fmt.Errorf("manifest of %d chunks: at most %d", len(lines)-1, MaxJobChunks)
	}
	m := &JobManifest{Size: size, Chunks: make([]string, 0, len(lines)-1)}
	for _, l := range lines[1:] {
		if err := CheckChunkHash(l); err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		m.Chunks = append(m.Chunks, l)
	}
	return m, nil
}

// FormatWorkingDirRef is the EnvWorkingDir value naming the working dir
// whose manifest hashes to hash, held by the node at holder (host:port).
func FormatWorkingDirRef(hash, holder string) string { return hash + "@" + holder }

// ParseWorkingDirRef splits an EnvWorkingDir value into the manifest's
// hash and the holder's host:port. Error: not "<64 lowercase hex>@<host:port
// of at most 256 bytes>".
func ParseWorkingDirRef(ref string) (hash, holder string, err error) {
	hash, holder, ok := strings.Cut(ref, "@")
	if !ok || CheckChunkHash(hash) != nil || holder == "" || len(holder) > maxHolderAddr ||
		strings.ContainsAny(holder, "@/\x00 ") || !strings.Contains(holder, ":") {
		return "", "", fmt.Errorf("working dir ref %q: want <sha256 of the manifest, 64 lowercase hex>@<host:port of a node holding it>", truncateString(ref, 400))
	}
	return hash, holder, nil
}

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
