package cluster

import (
	"archive/tar"
	"bytes"
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

	"go.uber.org/goleak"

	"github.com/nodeup/nodeup/internal/testutil"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// tarEntry is one entry of a crafted archive.
type tarEntry struct {
	name string
	typ  byte
	body string // content, or a symlink's target
}

func craftTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o755}
		switch e.typ {
		case tar.TypeReg:
			hdr.Size = int64(len(e.body))
		case tar.TypeSymlink, tar.TypeLink:
			hdr.Linkname = e.body
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// A hostile working-dir archive is refused entry by entry, and nothing
// lands outside the dir it unpacks to; a good one unpacks whole.
func TestUnpackJobArchiveRefusesEscapes(t *testing.T) {
	t.Parallel()
	good := craftTar(t,
		tarEntry{"sub/", tar.TypeDir, ""},
		tarEntry{"sub/data.txt", tar.TypeReg, "words"},
		tarEntry{"./run.sh", tar.TypeReg, "#!/bin/sh\n"},
		tarEntry{"link", tar.TypeSymlink, "sub/data.txt"},
	)
	dst := filepath.Join(t.TempDir(), "wd")
	if err := unpackJobArchive(bytes.NewReader(good), dst, 1<<20); err != nil {
		t.Fatalf("good archive: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "link")); err != nil || string(b) != "words" {
		t.Fatalf("link → sub/data.txt reads %q, %v", b, err)
	}

	for _, tc := range []struct {
		what    string
		entries []tarEntry
		want    error
	}{
		{"dot-dot name", []tarEntry{{"../escape", tar.TypeReg, "x"}}, ErrJobArchive},
		{"dot-dot inside a name", []tarEntry{{"a/../../escape", tar.TypeReg, "x"}}, ErrJobArchive},
		{"absolute name", []tarEntry{{"/tmp/escape", tar.TypeReg, "x"}}, ErrJobArchive},
		{"symlink out", []tarEntry{{"out", tar.TypeSymlink, "../../etc"}}, ErrJobArchive},
		{"absolute symlink", []tarEntry{{"out", tar.TypeSymlink, "/etc"}}, ErrJobArchive},
		{"symlink climbing back up", []tarEntry{{"a/b/c/", tar.TypeDir, ""}, {"a/b/c/y", tar.TypeSymlink, "../../.."}}, ErrJobArchive},
		{"write through a symlink to outside", []tarEntry{{"d", tar.TypeSymlink, "."}, {"d/../../x", tar.TypeReg, "x"}}, ErrJobArchive},
		{"hard link", []tarEntry{{"h", tar.TypeLink, "/etc/passwd"}}, ErrJobArchive},
		{"device", []tarEntry{{"dev", tar.TypeChar, ""}}, ErrJobArchive},
		{"name twice", []tarEntry{{"f", tar.TypeReg, "1"}, {"f", tar.TypeReg, "2"}}, ErrJobArchive},
		{"name too long", []tarEntry{{strings.Repeat("n/", 600) + "f", tar.TypeReg, "x"}}, ErrJobArchive},
		{"over the cap", []tarEntry{{"big", tar.TypeReg, strings.Repeat("x", 2048)}}, ErrWorkingDirTooLarge},
		{"garbage", nil, ErrJobArchive},
	} {
		t.Run(tc.what, func(t *testing.T) {
			root := t.TempDir()
			dst := filepath.Join(root, "wd")
			b := craftTar(t, tc.entries...)
			if tc.entries == nil {
				b = bytes.Repeat([]byte{0xff}, 1024)
			}
			err := unpackJobArchive(bytes.NewReader(b), dst, 1024)
			if !errors.Is(err, tc.want) {
				t.Fatalf("unpack: %v, want %v", err, tc.want)
			}
			ents, _ := os.ReadDir(root)
			if len(ents) != 1 || ents[0].Name() != "wd" {
				t.Fatalf("something landed beside the working dir: %v", ents)
			}
		})
	}
}

// chunkUp stores b as chunks on nd and returns its manifest.
func chunkUp(t *testing.T, nd *Node, b []byte) *wire.JobManifest {
	t.Helper()
	m := &wire.JobManifest{Size: int64(len(b))}
	for off := 0; off < len(b); off += wire.MaxJobChunkBytes {
		c := b[off:min(len(b), off+wire.MaxJobChunkBytes)]
		sum := sha256.Sum256(c)
		h := hex.EncodeToString(sum[:])
		if _, err := nd.jobUpload(context.Background(), &wire.JobUploadRequest{Hash: h, Data: c}); err != nil {
			t.Fatal(err)
		}
		m.Chunks = append(m.Chunks, h)
	}
	return m
}

// jobOn is job id's record in nd's copy of the state, an empty PENDING
// one while nd has not seen it yet (followers trail the leader).
func jobOn(t *testing.T, nd *Node, id string) *wire.JobRecord {
	t.Helper()
	rec, err := nd.fsm.State().JobByID(id)
	if err != nil {
		t.Fatalf("job %s on %s: %v", id, nd.Name(), err)
	}
	if rec == nil {
		return &wire.JobRecord{ID: id, Status: wire.JobPending, Message: "not seen yet on " + nd.Name()}
	}
	return rec
}

// A job submitted at one node runs on the node that has its entrypoint
// resources, in its unpacked working dir (fetched from the entry node);
// its logs are read through a third node; its exit code is recorded. A
// job on the leader is FAILED when the leader dies, and the finished
// job's record outlives the leader.
func TestJobSubmitRunsOnTheResourceNodeAndSurvivesLeaderLoss(t *testing.T) {
	nodes := testCluster(t, 3, func(i int, c *Config) {
		c.Insecure = true
		c.Resources[fmt.Sprintf("n%d", i)] = sched.QuantityOf(1)
	})
	waitFormed(t, nodes, 3, 3)
	leader := leaderOf(t, nodes)
	var follower []*Node
	for _, nd := range nodes {
		if nd != leader {
			follower = append(follower, nd)
		}
	}
	entry, runner := follower[0], follower[1]
	ctx := context.Background()

	// An uploaded chunk must match its name.
	if _, err := entry.jobUpload(ctx, &wire.JobUploadRequest{Hash: strings.Repeat("a", 64), Data: []byte("x")}); err == nil {
		t.Fatal("a chunk whose sha256 is not its name was stored")
	}

	archive := craftTar(t, tarEntry{"data.txt", tar.TypeReg, "the data file\n"})
	m := chunkUp(t, entry, archive)
	rec, err := entry.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "reads-data", Entrypoint: []string{"/bin/sh", "-c", `cat data.txt; echo "addr=$NODEUP_ADDRESS id=$NODEUP_JOB_SUBMISSION_ID wd=$NODEUP_WORKING_DIR"; exit 7`},
		Resources: map[string]float64{runner.Name(): 1}, Manifest: m})
	if err != nil {
		t.Fatal(err)
	}
	if rec.NodeID != runner.ID() {
		t.Fatalf("job ran on %s, want %s (the node with resource %s)", rec.NodeName, runner.Name(), runner.Name())
	}
	testutil.Until(t, 10*time.Second, "job reads-data FAILED with exit code 7", func() error {
		if r := jobOn(t, leader, "reads-data"); r.Status != wire.JobFailed || r.ExitCode != 7 {
			return fmt.Errorf("%s exit %d: %s", r.Status, r.ExitCode, r.Message)
		}
		return nil
	})
	logs, err := leader.jobLogs(ctx, &wire.JobLogsRequest{ID: "reads-data"})
	if err != nil {
		t.Fatal(err)
	}
	// NODEUP_WORKING_DIR gives the driver's tasks the job's working dir,
	// held by the job's node, which keeps the manifest for them.
	addr := runner.SocketAddr()
	if addr == "" {
		addr = runner.RPCAddr()
	}
	want := "the data file\naddr=" + addr + " id=reads-data wd=" + wire.FormatWorkingDirRef(m.Hash(), runner.RPCAddr()) + "\n"
	if !runner.jobs.chunks.has(m.Hash()) {
		t.Errorf("the job's node does not keep the working dir's manifest %s", m.Hash())
	}
	if string(logs.Data) != want {
		t.Fatalf("logs through %s: %q, want %q", leader.Name(), logs.Data, want)
	}

	if _, err := entry.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "reads-data", Entrypoint: []string{"true"}}); err == nil {
		t.Fatal("a second job with the same ID was accepted")
	}
	if _, err := entry.jobSubmit(ctx, &wire.JobSubmitRequest{Entrypoint: []string{"true"}, Resources: map[string]float64{"GPU": 8}}); err == nil {
		t.Fatal("a job no node has resources for was accepted")
	}

	// A long job on the leader: FAILED with the reason once the leader is gone.
	long, err := entry.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "on-leader", Entrypoint: []string{"sleep", "600"},
		Resources: map[string]float64{leader.Name(): 1}})
	if err != nil {
		t.Fatal(err)
	}
	pid := long.PID
	if long.Status != wire.JobRunning || pid == 0 || !processExists(pid) {
		t.Fatalf("job on-leader: %s, pid %d not running", long.Status, pid)
	}
	leader.Kill()
	testutil.Until(t, 45*time.Second, "job on-leader FAILED after the leader died", func() error {
		r := jobOn(t, runner, "on-leader")
		if r.Status != wire.JobFailed || !strings.Contains(r.Message, "died") {
			return fmt.Errorf("%s: %s", r.Status, r.Message)
		}
		return nil
	})
	if processExists(pid) {
		t.Errorf("job on-leader's process %d outlived its node", pid)
	}
	if r := jobOn(t, runner, "reads-data"); r.Status != wire.JobFailed || r.ExitCode != 7 || r.CreateIndex == 0 {
		t.Fatalf("reads-data after the leader's loss: %s exit %d", r.Status, r.ExitCode)
	}
	// A job whose node is dead is deleted all the same: its files went
	// with the node, its record goes through the new leader.
	if _, err := runner.jobDelete(ctx, &wire.JobDeleteRequest{ID: "on-leader"}); err != nil {
		t.Fatalf("delete of a job whose node died: %v", err)
	}
	if r, _ := runner.fsm.State().JobByID("on-leader"); r != nil {
		t.Fatalf("on-leader after delete: %s", r.Status)
	}
}

func processExists(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is gone for our purposes.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// A working dir over the node's cap is refused before anything is
// fetched or unpacked, naming the sizes and the flag that sets the cap.
func TestJobSubmitOverTheWorkingDirCap(t *testing.T) {
	nd := testCluster(t, 1, func(_ int, c *Config) { c.Insecure = true; c.MaxWorkingDirBytes = 4096 })[0]
	waitFormed(t, []*Node{nd}, 1, 1)
	big := craftTar(t, tarEntry{"big", tar.TypeReg, strings.Repeat("x", 8192)})
	m := chunkUp(t, nd, big)
	_, err := nd.jobSubmit(context.Background(), &wire.JobSubmitRequest{ID: "big", Entrypoint: []string{"true"}, Manifest: m})
	if err == nil || !strings.Contains(err.Error(), "--max-working-dir") || !strings.Contains(err.Error(), "at most 4096") {
		t.Fatalf("submit of a %d-byte working dir to a node capped at 4096: %v", len(big), err)
	}
	// A manifest whose chunk count does not match its size is refused too.
	m.Size, m.Chunks = 100, append(m.Chunks, m.Chunks[0])
	if _, err := nd.jobSubmit(context.Background(), &wire.JobSubmitRequest{ID: "odd", Entrypoint: []string{"true"}, Manifest: m}); err == nil {
		t.Fatal("a manifest of 2 chunks for 100 bytes was accepted")
	}
	if r, _ := nd.fsm.State().JobByID("big"); r != nil {
		t.Fatalf("a refused job was recorded: %+v", r)
	}
}

// A job the table says runs on this node, from before the node's
// supervisor started (the node restarted under its ID before the leader
// saw it dead), is recorded FAILED by the node itself.
func TestJobOrphanedByARestartFails(t *testing.T) {
	nd := testCluster(t, 1, insecure)[0]
	waitFormed(t, []*Node{nd}, 1, 1)
	ctx := context.Background()
	before := nd.jobs.since.Add(-time.Minute).UnixNano()
	orphan := &wire.JobRecord{ID: "orphan", Status: wire.JobPending, Entrypoint: []string{"sleep", "1"}, NodeID: nd.ID(), NodeName: nd.Name(), SubmittedAt: before}
	if err := nd.writeJob(ctx, orphan, true); err != nil {
		t.Fatal(err)
	}
	orphan.Status, orphan.StartedAt, orphan.PID = wire.JobRunning, before, 12345
	if err := nd.writeJob(ctx, orphan, false); err != nil {
		t.Fatal(err)
	}
	// One of this run's jobs is left alone.
	if _, err := nd.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "current", Entrypoint: []string{"sleep", "30"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 10*time.Second, "the orphan FAILED", func() error {
		if r := jobOn(t, nd, "orphan"); r.Status != wire.JobFailed || !strings.Contains(r.Message, "restarted") {
			return fmt.Errorf("%s: %s", r.Status, r.Message)
		}
		return nil
	})
	if r := jobOn(t, nd, "current"); r.Status != wire.JobRunning {
		t.Fatalf("this run's job: %s: %s", r.Status, r.Message)
	}
}

// The chunk cache stays under its cap: uploads past it evict the oldest
// chunks, never the one just written.
func TestJobChunkCacheIsBounded(t *testing.T) {
	t.Parallel()
	c := &jobChunks{dir: t.TempDir(), max: 10 << 10, size: -1}
	var last string
	for i := 0; i < 40; i++ {
		data := bytes.Repeat([]byte{byte(i)}, 1<<10)
		sum := sha256.Sum256(data)
		last = hex.EncodeToString(sum[:])
		if err := c.put(last, data); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	ents, _ := os.ReadDir(c.dir)
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
	}
	if total > c.max || !c.has(last) {
		t.Fatalf("cache holds %d bytes in %d chunks (cap %d), latest kept: %v", total, len(ents), c.max, c.has(last))
	}
}

// Unpacked working dirs are kept per content hash, reused, and pruned to
// 2*chunkCacheDirs, never one a running job uses.
func TestJobWorkingDirsArePruned(t *testing.T) {
	nd := testCluster(t, 1, insecure)[0]
	var first string
	for i := 0; i < 3*chunkCacheDirs; i++ {
		m := chunkUp(t, nd, craftTar(t, tarEntry{"f", tar.TypeReg, fmt.Sprint(i)}))
		wd, err := nd.jobs.unpack(m)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := nd.jobs.unpack(m); err != nil || again != wd {
			t.Fatalf("second unpack of the same dir: %s, %v; want the cached %s", again, err, wd)
		}
		nd.jobs.pin(wd, -2)
		if i == 0 {
			first = wd
			nd.jobs.mu.Lock()
			nd.jobs.procs["uses-first"] = &jobProc{wd: wd, rec: &wire.JobRecord{ID: "uses-first"}, done: make(chan struct{})}
			nd.jobs.mu.Unlock()
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(first))
	if len(ents) > 2*chunkCacheDirs+1 {
		t.Fatalf("%d unpacked working dirs kept, want at most %d (+1 in use)", len(ents), 2*chunkCacheDirs)
	}
	if _, err := os.Stat(filepath.Join(first, "f")); err != nil {
		t.Fatalf("the dir a running job uses was pruned: %v", err)
	}
	nd.jobs.mu.Lock()
	delete(nd.jobs.procs, "uses-first")
	nd.jobs.mu.Unlock()
}

// A node that stops kills its running jobs' process groups, and the
// supervisor leaves no goroutine behind.
func TestNodeStopKillsItsJobsAndLeavesNoGoroutines(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	nd := testCluster(t, 1, insecure)[0]
	waitFormed(t, []*Node{nd}, 1, 1)
	rec, err := nd.jobSubmit(context.Background(), &wire.JobSubmitRequest{ID: "long", Entrypoint: []string{"sh", "-c", "sleep 600 & wait"}})
	if err != nil || rec.Status != wire.JobRunning || !processExists(rec.PID) {
		t.Fatalf("job long: %+v, %v", rec, err)
	}
	if err := nd.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "the job's process gone", func() error {
		if processExists(rec.PID) {
			return fmt.Errorf("pid %d still runs", rec.PID)
		}
		return nil
	})
	goleak.VerifyNone(t, ignore,
		goleak.IgnoreTopFunction("github.com/vmihailenco/msgpack/v5.cachedValue.func1"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// groupMembers lists the live (not zombie) processes in process group
// pgid, from /proc.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command: state ppid pgrp ...
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		var pid int
		if len(f) < 3 || f[0] == "Z" || f[2] != fmt.Sprint(pgid) {
			continue
		}
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// job stop ends an entrypoint that traps SIGTERM and whose children
// ignore it: SIGTERM to the whole group, SIGKILL after the grace period,
// nothing of the group left, the job STOPPED.
func TestJobStopKillsTheWholeGroupAfterGrace(t *testing.T) {
	nd := testCluster(t, 1, insecure)[0]
	waitFormed(t, []*Node{nd}, 1, 1)
	ctx := context.Background()
	script := `trap 'echo TERM trapped' TERM
(trap '' TERM; exec sleep 1000) &
sleep 1000 &
echo started
while :; do wait; done`
	rec, err := nd.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "stubborn", Entrypoint: []string{"/bin/sh", "-c", script}})
	if err != nil || rec.Status != wire.JobRunning {
		t.Fatalf("submit: %+v, %v", rec, err)
	}
	pgid := rec.PID
	testutil.Until(t, 10*time.Second, "the entrypoint and its two children run", func() error {
		logs, err := nd.jobLogs(ctx, &wire.JobLogsRequest{ID: "stubborn"})
		if err != nil {
			return err
		}
		if m := groupMembers(pgid); !strings.Contains(string(logs.Data), "started") || len(m) < 3 {
			return fmt.Errorf("log %q, group %d holds %v", logs.Data, pgid, m)
		}
		return nil
	})
	const grace = 300 * time.Millisecond
	start := time.Now()
	if _, err := nd.jobStop(ctx, &wire.JobStopRequest{ID: "stubborn", GraceNanos: int64(grace)}); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 10*time.Second, "job stubborn STOPPED", func() error {
		if r := jobOn(t, nd, "stubborn"); r.Status != wire.JobStopped {
			return fmt.Errorf("%s: %s", r.Status, r.Message)
		}
		return nil
	})
	took := time.Since(start)
	if m := groupMembers(pgid); len(m) > 0 {
		t.Fatalf("process group %d still holds %v after the job was STOPPED", pgid, m)
	}
	if took < grace {
		t.Errorf("STOPPED after %s, before the %s grace period: SIGKILL came early", took, grace)
	}
	logs, _ := nd.jobLogs(ctx, &wire.JobLogsRequest{ID: "stubborn"})
	if !strings.Contains(string(logs.Data), "TERM trapped") {
		t.Errorf("the entrypoint never saw SIGTERM before SIGKILL: log %q", logs.Data)
	}
}

// An entrypoint that exits while a child it started in the background
// still holds its output ends the job (as Ray's: the job is its
// entrypoint), and the child goes with it.
func TestJobEndsWithItsEntrypointNotItsChildren(t *testing.T) {
	nd := testCluster(t, 1, insecure)[0]
	waitFormed(t, []*Node{nd}, 1, 1)
	ctx := context.Background()
	rec, err := nd.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "leaves-child", Entrypoint: []string{"/bin/sh", "-c", "sleep 1000 & echo bye"}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 10*time.Second, "job leaves-child SUCCEEDED", func() error {
		if r := jobOn(t, nd, "leaves-child"); r.Status != wire.JobSucceeded {
			return fmt.Errorf("%s: %s", r.Status, r.Message)
		}
		return nil
	})
	testutil.Until(t, 5*time.Second, "the background child gone", func() error {
		if m := groupMembers(rec.PID); len(m) > 0 {
			return fmt.Errorf("group %d holds %v", rec.PID, m)
		}
		return nil
	})
}

// job delete, through a node that does not run the job, removes a
// finished job's record from every node (through Raft) and its log and
// unpacked working dir from the node that ran it; a RUNNING job and an
// unknown one are refused, naming the status or the ID.
func TestJobDeleteRemovesRecordLogAndWorkingDir(t *testing.T) {
	nodes := testCluster(t, 2, func(i int, c *Config) {
		c.Insecure = true
		c.Resources[fmt.Sprintf("n%d", i)] = sched.QuantityOf(1)
	})
	waitFormed(t, nodes, 2, 2)
	entry, runner := nodes[0], nodes[1]
	ctx := context.Background()
	m := chunkUp(t, entry, craftTar(t, tarEntry{"data.txt", tar.TypeReg, "hello\n"}))
	if _, err := entry.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "done", Entrypoint: []string{"cat", "data.txt"},
		Resources: map[string]float64{runner.Name(): 1}, Manifest: m}); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 10*time.Second, "job done SUCCEEDED on both nodes", func() error {
		for _, nd := range nodes {
			if r := jobOn(t, nd, "done"); r.Status != wire.JobSucceeded {
				return fmt.Errorf("on %s: %s: %s", nd.Name(), r.Status, r.Message)
			}
		}
		return nil
	})
	rec := jobOn(t, runner, "done")
	wd, log := runner.jobs.wdPath(rec.WorkingDir), runner.jobs.logPath("done")
	for _, p := range []string{wd, log} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("before delete: %v", err)
		}
	}

	// A running job is refused, naming its status; its files stay.
	if _, err := entry.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "long", Entrypoint: []string{"sleep", "600"},
		Resources: map[string]float64{runner.Name(): 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := entry.jobDelete(ctx, &wire.JobDeleteRequest{ID: "long"})
	if !errors.Is(err, store.ErrJobNotFinal) || !strings.Contains(err.Error(), "RUNNING") {
		t.Fatalf("delete of a running job: %v, want ErrJobNotFinal naming RUNNING", err)
	}
	// The Local hop refuses it too, should a client send one itself.
	if _, err := runner.jobDelete(ctx, &wire.JobDeleteRequest{ID: "long", Local: true}); err == nil || !strings.Contains(err.Error(), "RUNNING") {
		t.Fatalf("local delete of a running job: %v", err)
	}
	if _, err := os.Stat(runner.jobs.logPath("long")); err != nil {
		t.Fatalf("a refused delete removed the running job's log: %v", err)
	}
	var re *rpc.Error
	if _, err := entry.jobDelete(ctx, &wire.JobDeleteRequest{ID: "nope"}); !errors.As(err, &re) || re.Code != wire.CodeNotFound || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("delete of an unknown job: %v, want not_found naming it", err)
	}

	got, err := entry.jobDelete(ctx, &wire.JobDeleteRequest{ID: "done"})
	if err != nil || got.ID != "done" {
		t.Fatalf("delete: %+v, %v", got, err)
	}
	testutil.Until(t, 10*time.Second, "job done gone from both nodes", func() error {
		for _, nd := range nodes {
			if r, _ := nd.fsm.State().JobByID("done"); r != nil {
				return fmt.Errorf("%s still has %s", nd.Name(), r.Status)
			}
		}
		return nil
	})
	for _, p := range []string{wd, log} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after delete: %v, want it gone", p, err)
		}
	}
	// The ID is free again.
	if _, err := entry.jobSubmit(ctx, &wire.JobSubmitRequest{ID: "done", Entrypoint: []string{"true"}}); err != nil {
		t.Fatalf("resubmit a deleted job's ID: %v", err)
	}
}

// A delete that comes between the supervisor's record of a job's end and
// its letting go of the process waits for the latter instead of refusing
// a job whose status it names as finished.
func TestJobDeleteWaitsForTheSupervisorToLetGo(t *testing.T) {
	nd := testCluster(t, 1, insecure)[0]
	waitFormed(t, []*Node{nd}, 1, 1)
	ctx := context.Background()
	rec := &wire.JobRecord{ID: "ending", Status: wire.JobPending, Entrypoint: []string{"true"}, NodeID: nd.ID(), NodeName: nd.Name(), SubmittedAt: time.Now().UnixNano()}
	if err := nd.writeJob(ctx, rec, true); err != nil {
		t.Fatal(err)
	}
	nd.jobs.mu.Lock()
	nd.jobs.procs["ending"] = &jobProc{rec: rec, done: make(chan struct{})}
	nd.jobs.mu.Unlock()
	done := rec.Copy()
	done.Status, done.EndedAt = wire.JobSucceeded, time.Now().UnixNano()
	if err := nd.writeJob(ctx, done, false); err != nil {
		t.Fatal(err)
	}
	letGo := time.AfterFunc(300*time.Millisecond, func() {
		nd.jobs.mu.Lock()
		delete(nd.jobs.procs, "ending")
		nd.jobs.mu.Unlock()
	})
	defer letGo.Stop()
	if _, err := nd.jobDelete(ctx, &wire.JobDeleteRequest{ID: "ending"}); err != nil {
		t.Fatalf("delete of a job whose end is recorded: %v", err)
	}
	if r, _ := nd.fsm.State().JobByID("ending"); r != nil {
		t.Fatalf("record after delete: %+v", r)
	}
}
