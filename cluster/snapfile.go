package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// A snapshot file (`nodeup operator snapshot save`) is
//
//	magic "NUSNAPF1" (8 bytes) | Raft index (uint64, big endian) |
//	Raft term (uint64) | SHA-256 of the data (32 bytes) | data
//
// where data is the store's snapshot stream. The checksum catches a file
// damaged at rest, which the stream's own checks might decode as valid.
const (
	snapFileMagic  = "NUSNAPF1"
	snapFileHeader = len(snapFileMagic) + 8 + 8 + sha256.Size
)

// SnapshotFileError is why a snapshot file cannot be restored: Path names
// the file and Problem what is wrong with it.
type SnapshotFileError struct {
	Path    string
	Problem string
	Err     error
}

// Error names the file and the problem.
func (e *SnapshotFileError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("snapshot file %s: %s: %v", e.Path, e.Problem, e.Err)
	}
	return fmt.Sprintf("snapshot file %s: %s", e.Path, e.Problem)
}

// Unwrap returns the underlying error, if any.
func (e *SnapshotFileError) Unwrap() error { return e.Err }

// WriteSnapshotFile writes s to path (mode 0600: it holds every token's
// hash and the KV), through a temporary file renamed into place so a failed
// save never leaves a partial file under path.
func WriteSnapshotFile(path string, s *wire.Snapshot) error {
	var hdr [snapFileHeader]byte
	copy(hdr[:], snapFileMagic)
	binary.BigEndian.PutUint64(hdr[8:], s.Index)
	binary.BigEndian.PutUint64(hdr[16:], s.Term)
	sum := sha256.Sum256(s.Data)
	copy(hdr[24:], sum[:])
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot file %s: %w", path, err)
	}
	_, err = f.Write(hdr[:])
	if err == nil {
		_, err = f.Write(s.Data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot file %s: %w", path, err)
	}
	return nil
}

// ReadSnapshotFile reads and checks a snapshot file, untrusted input: its
// size (at most wire.MaxSnapshotSize of data), magic, checksum, and the
// stream itself as the FSM's Restore would read it (store.VerifySnapshot).
// Every failure is a *SnapshotFileError naming path.
func ReadSnapshotFile(path string) (*wire.Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &SnapshotFileError{Path: path, Problem: "cannot open", Err: err}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(snapFileHeader+wire.MaxSnapshotSize+1)))
	if err != nil {
		return nil, &SnapshotFileError{Path: path, Problem: "cannot read", Err: err}
	}
	switch {
	case len(b) > snapFileHeader+wire.MaxSnapshotSize:
		return nil, &SnapshotFileError{Path: path, Problem: fmt.Sprintf("larger than %d bytes, the most a restore accepts", snapFileHeader+wire.MaxSnapshotSize)}
	case len(b) < snapFileHeader || string(b[:8]) != snapFileMagic:
		return nil, &SnapshotFileError{Path: path, Problem: "not a nodeup snapshot file (no NUSNAPF1 header; make one with nodeup operator snapshot save)"}
	}
	s := &wire.Snapshot{Index: binary.BigEndian.Uint64(b[8:]), Term: binary.BigEndian.Uint64(b[16:]), Data: b[snapFileHeader:]}
	if sum := sha256.Sum256(s.Data); !bytes.Equal(sum[:], b[24:snapFileHeader]) {
		return nil, &SnapshotFileError{Path: path, Problem: "checksum mismatch: the file is damaged or truncated"}
	}
	if err := store.VerifySnapshot(bytes.NewReader(s.Data)); err != nil {
		return nil, &SnapshotFileError{Path: path, Problem: "bad contents", Err: err}
	}
	return s, nil
}
