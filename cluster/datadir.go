package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Files in a node's data dir.
const (
	identityFile = "node.json"
	lockFile     = "nodeup.lock"
	addressFile  = "rpc.addr"
	raftDir      = "raft"
	// peersFile ("peers.json", peers.go) remembers the other members.
)

// Identity is what a node remembers across restarts in its data dir: who it
// is, which cluster it belongs to, and how often it has started (the
// incarnation, so the cluster knows work of an earlier life is gone). Its
// peers are remembered in peers.json (peers.go).
type Identity struct {
	NodeID      string `json:"node_id"`
	ClusterID   string `json:"cluster_id,omitempty"`
	ClusterName string `json:"cluster_name,omitempty"`
	Incarnation uint64 `json:"incarnation"`
	// RaftState records that this node has held Raft state (a term, log
	// entries or a snapshot): from then on a missing, empty or stateless
	// raft.db is lost data, and the node refuses to start (RaftDataError)
	// instead of rejoining as a voter with no history.
	RaftState bool `json:"raft_state,omitempty"`
}

// dataDir is an opened, locked data dir.
type dataDir struct {
	path string
	lock *os.File
}

// openDataDir creates path if needed and takes an exclusive lock on it, so
// two daemons never share one Raft log.
func openDataDir(path string) (*dataDir, error) {
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", path, err)
	}
	f, err := os.OpenFile(filepath.Join(path, lockFile), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(f.Name())
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another nodeup process (pid %s)", path, strings.TrimSpace(string(pid)))
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dataDir{path: path, lock: f}, nil
}

func (d *dataDir) file(name string) string { return filepath.Join(d.path, name) }

// readIdentity returns the stored identity, or a fresh one with a new node ID
// when the data dir is new. A corrupt file is an error: it is never overwritten.
func (d *dataDir) readIdentity() (Identity, error) {
	var id Identity
	b, err := os.ReadFile(d.file(identityFile))
	if errors.Is(err, os.ErrNotExist) {
		id.NodeID = newID()
		return id, nil
	}
	if err != nil {
		return id, err
	}
	if err := json.Unmarshal(b, &id); err != nil || id.NodeID == "" {
		return id, fmt.Errorf("%s is corrupt (move it away to start as a new node): %v", d.file(identityFile), err)
	}
	return id, nil
}

// writeIdentity replaces node.json atomically.
func (d *dataDir) writeIdentity(id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(d.file(identityFile), append(b, '\n'))
}

func (d *dataDir) close() {
	if d.lock != nil {
		_ = d.lock.Truncate(0)
		d.lock.Close()
		d.lock = nil
	}
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// newID returns 16 random bytes in hex: node and cluster IDs.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ReadDataDirPID returns the PID of the daemon holding the data dir at path,
// or 0 when none does. Errors only for unreadable dirs.
func ReadDataDirPID(path string) (int, error) {
	f, err := os.OpenFile(filepath.Join(path, lockFile), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// If we can take the lock, nobody holds it.
	if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return 0, nil
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s holds %q, not a PID", f.Name(), strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// ReadDataDirAddress returns the RPC address recorded by the daemon running
// on the data dir at path ("" when none is recorded).
func ReadDataDirAddress(path string) string {
	b, err := os.ReadFile(filepath.Join(path, addressFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
