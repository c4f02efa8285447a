package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/nodeup/nodeup/wire"
)

// TestCorruptRaftDataRefused damages a stopped node's raft.db in the ways
// issue 13 lists (truncated, random bytes, empty, missing) and a few more,
// and checks that the restart fails with one line that names the file and
// the remedy, instead of a bbolt or Raft panic or a silent start as an
// empty voter.
func TestCorruptRaftDataRefused(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	n := nodes[0]
	for i := 0; i < 300; i++ { // ~600 KB of log: many pages
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var r wire.KVResponse
		err := n.forward(ctx, wire.MethodKVSet, &wire.KVRequest{Key: fmt.Sprintf("k%03d", i), Value: make([]byte, 2000)}, &r)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, identityFile)); err != nil || !strings.Contains(string(b), `"raft_state": true`) {
		t.Errorf("node.json does not record that the node holds Raft state: %s %v", b, err)
	}
	n.Kill()
	golden := n.cfg.DataDir

	restart := func(t *testing.T, damage func(db string)) (Config, error) {
		t.Helper()
		cfg := n.cfg
		cfg.DataDir = filepath.Join(t.TempDir(), "copy")
		cfg.Port, cfg.GossipPort = 0, 0
		if err := os.CopyFS(cfg.DataDir, os.DirFS(golden)); err != nil {
			t.Fatal(err)
		}
		damage(filepath.Join(cfg.DataDir, raftDir, "raft.db"))
		nd, err := Start(context.Background(), cfg)
		if err == nil {
			t.Cleanup(nd.Kill)
		}
		return cfg, err
	}

	t.Run("intact", func(t *testing.T) {
		if _, err := restart(t, func(string) {}); err != nil {
			t.Fatalf("restart on intact data: %v", err)
		}
	})
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, db string)
		want   string
	}{
		{"truncated_half", func(t *testing.T, db string) { truncateHalf(t, db) }, "is truncated"},
		{"random_bytes_middle", func(t *testing.T, db string) { scribble(t, db, fileSize(t, db)/2, 16<<10) }, "is corrupt"},
		{"random_bytes_header", func(t *testing.T, db string) { scribble(t, db, 0, 8<<10) }, "is corrupt"},
		{"random_bytes_wide", func(t *testing.T, db string) { scribble(t, db, fileSize(t, db)/4, 256<<10) }, "is corrupt"},
		{"random_bytes_branch_page", func(t *testing.T, db string) { scribblePage(t, db, "branch") }, "is corrupt"},
		{"random_bytes_freelist_page", func(t *testing.T, db string) { scribblePage(t, db, "freelist") }, "is corrupt"},
		{"empty_file", func(t *testing.T, db string) { must(t, os.Truncate(db, 0)) }, "is empty"},
		{"missing_file", func(t *testing.T, db string) { must(t, os.Remove(db)) }, "is missing"},
		{"fresh_empty_store", func(t *testing.T, db string) { freshStore(t, db) }, "holds no Raft state"},
		{"lost_log_entries", func(t *testing.T, db string) { deleteLogs(t, db, 40, 60) }, "log entries 40..59 are missing"},
		{"lost_first_entries", func(t *testing.T, db string) { deleteLogs(t, db, 1, 5) }, "is missing log entries 1..4"},
		{"term_lost", func(t *testing.T, db string) { deleteConf(t, db, "CurrentTerm") }, "no current term"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := restart(t, func(db string) { tc.damage(t, db) })
			if err == nil {
				t.Fatal("the node started on damaged Raft data")
			}
			msg := err.Error()
			db := filepath.Join(cfg.DataDir, raftDir, "raft.db")
			for _, want := range []string{"Raft data " + db + " ", tc.want, "restore " + filepath.Dir(db) + " from a backup",
				"move the data dir " + cfg.DataDir + " away"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error does not say %q:\n%s", want, msg)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line:\n%s", msg)
			}
			var rde *RaftDataError
			if !errors.As(err, &rde) || rde.Path != db {
				t.Errorf("error is %T, want a *RaftDataError for %s", err, db)
			}
		})
	}
}

// TestNewServerWithoutRaftData checks the other side of the missing-file
// rule: a node that never held Raft state starts without a raft.db.
func TestNewServerWithoutRaftData(t *testing.T) {
	if err := checkRaftData(t.TempDir(), false); err != nil {
		t.Fatalf("fresh data dir: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	must(t, err)
	return fi.Size()
}

func truncateHalf(t *testing.T, path string) {
	must(t, os.Truncate(path, fileSize(t, path)/2))
}

// scribble overwrites n bytes at off with a fixed pseudo-random pattern.
func scribble(t *testing.T, path string, off int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 13)
	}
	_, err = f.WriteAt(b, off)
	must(t, err)
}

// scribblePage overwrites the first page of type typ (branch, leaf,
// freelist) with scribble's pattern.
func scribblePage(t *testing.T, path, typ string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second}) // read-write: Tx.Page needs the free list
	must(t, err)
	var off int64 = -1
	size := db.Info().PageSize
	err = db.View(func(tx *bbolt.Tx) error {
		for id := 2; off < 0; id++ {
			p, err := tx.Page(id)
			if err != nil || p == nil {
				return fmt.Errorf("no %s page: %v", typ, err)
			}
			if p.Type == typ {
				off = int64(id) * int64(size)
			}
		}
		return nil
	})
	must(t, db.Close())
	must(t, err)
	scribble(t, path, off, size)
}

// freshStore replaces path with a new, valid raft-boltdb store.
func freshStore(t *testing.T, path string) {
	t.Helper()
	must(t, os.Remove(path))
	s, err := raftboltdb.New(raftboltdb.Options{Path: path})
	must(t, err)
	must(t, s.Close())
}

// deleteLogs removes log entries from..to-1 with bbolt, leaving a valid file.
func deleteLogs(t *testing.T, path string, from, to uint64) {
	t.Helper()
	editBolt(t, path, func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("logs"))
		for i := from; i < to; i++ {
			if err := b.Delete(binary.BigEndian.AppendUint64(nil, i)); err != nil {
				return err
			}
		}
		return nil
	})
}

func deleteConf(t *testing.T, path, key string) {
	t.Helper()
	editBolt(t, path, func(tx *bbolt.Tx) error { return tx.Bucket([]byte("conf")).Delete([]byte(key)) })
}

func editBolt(t *testing.T, path string, fn func(*bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	must(t, err)
	defer db.Close()
	must(t, db.Update(fn))
}
