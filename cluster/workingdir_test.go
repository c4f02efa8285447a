package cluster

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/wire"
)

// refOn uploads b's chunks and its manifest to nd, as the SDK does, and
// returns the working dir ref nd holds.
func refOn(t *testing.T, nd *Node, b []byte) string {
	t.Helper()
	m := chunkUp(t, nd, b)
	if _, err := nd.jobUpload(context.Background(), &wire.JobUploadRequest{Hash: m.Hash(), Data: m.Encode()}); err != nil {
		t.Fatal(err)
	}
	return wire.FormatWorkingDirRef(m.Hash(), nd.RPCAddr())
}

// A node that starts a worker in a working dir it lacks fetches the
// manifest and chunks from the holder, unpacks them once (a second pin
// shares the dir), and removes the dir when the last pin goes. When the
// holder lacks a chunk, another node that has it serves it.
func TestWorkingDirFetchedUnpackedSharedAndRemoved(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := refOn(t, nodes[0], craftTar(t, tarEntry{"data/", tar.TypeDir, ""}, tarEntry{"data/in.txt", tar.TypeReg, "shipped"}))
	knowsAll(t, nodes[1], 3)

	dir, release1, err := nodes[1].workingDir(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data", "in.txt")); err != nil || string(b) != "shipped" {
		t.Fatalf("data/in.txt in %s: %q, %v; want the shipped content", dir, b, err)
	}
	dir2, release2, err := nodes[1].workingDir(ctx, ref)
	if err != nil || dir2 != dir {
		t.Fatalf("a second worker's dir %q (%v), want the same %q", dir2, err, dir)
	}
	release1()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the dir went while a worker still holds it: %v", err)
	}
	release2()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dir stays after its last worker let go: %v", err)
	}

	// n2 gets the manifest from n1, which holds it now, though the ref
	// names n0: any node that has a chunk serves it.
	hash, _, _ := wire.ParseWorkingDirRef(ref)
	if err := os.Remove(nodes[0].jobs.chunks.path(hash)); err != nil {
		t.Fatal(err)
	}
	dir3, release3, err := nodes[2].workingDir(ctx, ref)
	if err != nil {
		t.Fatalf("with the holder's manifest gone: %v, want it from n1", err)
	}
	release3()
	if _, err := os.Stat(dir3); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("n2's dir stays after its last worker let go: %v", err)
	}
}

// Everything a peer sends for a working dir is checked: an archive with
// "../x" or an absolute name, a manifest whose lines are not chunk hashes,
// a chunk whose bytes do not hash to its name, and a ref that names no
// node of the cluster are refused, naming what is wrong, for good (a lease
// that needs it fails with runtime_env_setup_failed, not retried), and
// nothing is unpacked.
func TestWorkingDirRefusesHostileInput(t *testing.T) {
	nodes := testCluster(t, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	knowsAll(t, nodes[1], 2)
	holder := nodes[0]
	manifestRef := func(enc string) string {
		h := sha256hex([]byte(enc))
		if _, err := holder.jobUpload(ctx, &wire.JobUploadRequest{Hash: h, Data: []byte(enc)}); err != nil {
			t.Fatal(err)
		}
		return wire.FormatWorkingDirRef(h, holder.RPCAddr())
	}
	// A chunk whose bytes are not what its name says, as a hostile or
	// broken node would serve it.
	good := chunkUp(t, holder, []byte("unused"))
	liar := wire.JobManifest{Size: int64(len("other")), Chunks: good.Chunks}
	if err := os.WriteFile(holder.jobs.chunks.path(good.Chunks[0]), []byte("other"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what, ref, want string
	}{
		{"dot-dot", refOn(t, holder, craftTar(t, tarEntry{"../x", tar.TypeReg, "out"})), `"../x": names with ".." are refused`},
		{"absolute", refOn(t, holder, craftTar(t, tarEntry{"/etc/x", tar.TypeReg, "out"})), `"/etc/x": absolute names are refused`},
		{"symlink out", refOn(t, holder, craftTar(t, tarEntry{"l", tar.TypeSymlink, "../../etc"})), `a link must be relative and must not hold ".."`},
		{"bad manifest hash", manifestRef("5\nnot-a-hash\n"), `chunk hash "not-a-hash"`},
		{"size and chunks disagree", manifestRef("99999999\n" + good.Chunks[0] + "\n"), "manifest of 1 chunks"},
		{"lying chunk", manifestRef(string(liar.Encode())), "sent a bad one"},
		{"holder outside the cluster", wire.FormatWorkingDirRef(strings.Repeat("c", 64), "127.0.0.1:1"), "no node has it: asked 1 node(s), the last answered 127.0.0.1:"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			_, _, err := nodes[1].workingDir(ctx, tc.ref)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("workingDir: %v, want an error with %q", err, tc.want)
			}
			if !runtimeEnvRefused(err) {
				t.Errorf("%v is taken for a passing failure; the lease would be retried forever", err)
			}
			ents, _ := os.ReadDir(filepath.Join(nodes[1].jobs.root, "wd"))
			if len(ents) != 0 {
				t.Fatalf("a refused working dir left %d entries in wd/", len(ents))
			}
		})
	}
	if _, _, err := nodes[1].workingDir(ctx, "../../etc@n0:1"); err == nil || !strings.Contains(err.Error(), "want <sha256 of the manifest") {
		t.Fatalf("a malformed ref: %v, want it refused with its form", err)
	}
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// knowsAll waits until nd's member list holds n nodes.
func knowsAll(t *testing.T, nd *Node, n int) {
	t.Helper()
	testutil.Until(t, 10*time.Second, nd.Name()+" knows every node", func() error {
		if got := len(nd.peerAddrs()); got != n {
			return fmt.Errorf("%d members, want %d", got, n)
		}
		return nil
	})
}
