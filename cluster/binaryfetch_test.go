package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A binary fetched from a peer is bounded: past maxBinarySize the fetch
// fails naming the sizes, and nothing is left in the cache, however much
// the peer would send (the hash is checked only at the end).
func TestBinaryFetchBounded(t *testing.T) {
	nodes := testCluster(t, 2, nil)
	waitFormed(t, nodes, 2, 2)
	src, dst := nodes[0], nodes[1]
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	file := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(file, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := src.workers.cacheLocal(file, hash); err != nil {
		t.Fatal(err)
	}
	old := maxBinarySize
	maxBinarySize = 1 << 20
	defer func() { maxBinarySize = old }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := dst.workers.fetch(ctx, src.RPCAddr(), hash)
	if err == nil || !strings.Contains(err.Error(), "at most 1048576 are accepted") {
		t.Fatalf("fetch of a 3 MiB binary with a 1 MiB bound: %v", err)
	}
	left, _ := os.ReadDir(dst.workers.binDir())
	if len(left) != 0 {
		t.Fatalf("the cache holds %d files after the refused fetch", len(left))
	}
	maxBinarySize = old
	if err := dst.workers.fetch(ctx, src.RPCAddr(), hash); err != nil {
		t.Fatalf("fetch within the bound: %v", err)
	}
}
