package worker

import (
	"context"
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

// wdSeen is what a task saw of its working dir.
type wdSeen struct {
	Data, Err, Cwd, Node string
}

func seeWorkingDir() wdSeen {
	s := wdSeen{Node: os.Getenv(wire.EnvNodeID)}
	b, err := os.ReadFile(filepath.Join("data", "in.txt")) // relative: the working dir's
	s.Data = string(b)
	if err != nil {
		s.Err = err.Error()
	}
	s.Cwd, _ = os.Getwd()
	return s
}

var (
	wdRead = Register0(func(ctx context.Context) (wdSeen, error) { return seeWorkingDir(), nil })
	// wdNested runs wdRead as a child on node, which inherits its dir.
	wdNested = Register1(func(ctx context.Context, node string) (wdSeen, error) {
		return Must(wdRead.Options(NodeAffinity(node, false))).Remote(ctx).Get(ctx)
	})
)

type wdActor struct{}

func (a *wdActor) See(ctx context.Context) (wdSeen, error) { return seeWorkingDir(), nil }

var (
	wdActorClass = RegisterActor0(func(ctx context.Context) (*wdActor, error) { return &wdActor{}, nil })
	wdActorSee   = RegisterMethod0((*wdActor).See)
)

// writeWorkingDir makes a dir holding data/in.txt with body.
func writeWorkingDir(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "in.txt"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A job-wide working dir (ray.init(runtime_env={"working_dir": ...})):
// tasks pinned to each of three nodes, an actor, and a task's child on
// another node all read data/in.txt by relative path from the dir
// unpacked on their own node; a task whose WithRuntimeEnv names another
// dir reads that one; and once the driver shuts down (the job ends) no
// node keeps an unpacked dir.
func TestWorkingDirOnEveryNode(t *testing.T) {
	if _, err := os.Stat(filepath.Join("data", "in.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the test's own dir must not hold data/in.txt (%v)", err)
	}
	const body = "shipped with the job"
	nodes := startClusterInit(t, 3, nil, JobRuntimeEnv(RuntimeEnv{WorkingDir: writeWorkingDir(t, body)}))
	ctx := ctxT(t)
	check := func(what string, s wdSeen, nodeIdx int, want string) {
		t.Helper()
		nd := nodes[nodeIdx]
		if s.Data != want || s.Err != "" {
			t.Errorf("%s: read data/in.txt = %q (%s), want %q", what, s.Data, s.Err, want)
		}
		if s.Node != nd.ID() {
			t.Errorf("%s ran on node %s, want %s", what, s.Node, nd.ID())
		}
		if !strings.HasPrefix(s.Cwd, filepath.Join(nd.DataDir(), "jobs", "wd")+string(filepath.Separator)) {
			t.Errorf("%s ran in %s, want a dir under %s/jobs/wd", what, s.Cwd, nd.DataDir())
		}
	}
	for i, nd := range nodes {
		s, err := Must(wdRead.Options(NodeAffinity(nd.ID(), false))).Remote(ctx).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("task on n%d", i), s, i, body)
	}
	a, err := Must(wdActorClass.Options(NodeAffinity(nodes[2].ID(), false))).Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := wdActorSee.Remote(ctx, a).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("actor on n2", s, 2, body)
	s, err = Must(wdNested.Options(NodeAffinity(nodes[1].ID(), false))).Remote(ctx, nodes[2].ID()).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("child on n2 of a task on n1", s, 2, body)
	other := WithRuntimeEnv(RuntimeEnv{WorkingDir: writeWorkingDir(t, "per call")})
	s, err = Must(wdRead.Options(other, NodeAffinity(nodes[1].ID(), false))).Remote(ctx).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("task on n1 with its own working dir", s, 1, "per call")

	Shutdown()
	for _, nd := range nodes {
		wd := filepath.Join(nd.DataDir(), "jobs", "wd")
		testutil.Until(t, 30*time.Second, nd.Name()+" removes the job's working dirs", func() error {
			ents, err := os.ReadDir(wd)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if len(ents) > 0 {
				return fmt.Errorf("%s holds %d entries, first %s", wd, len(ents), ents[0].Name())
			}
			return nil
		})
	}
}

// A working dir that is not a directory fails Init, naming it; one given
// per call before Init fails Options the same way.
func TestWorkingDirErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wdRead.Options(WithRuntimeEnv(RuntimeEnv{WorkingDir: f})); err == nil || !strings.Contains(err.Error(), "working dir "+f) {
		t.Fatalf("Options before Init: %v, want an error naming the working dir", err)
	}
	startCluster(t, 1, nil)
	if _, err := wdRead.Options(WithRuntimeEnv(RuntimeEnv{WorkingDir: f})); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Options with a file as working dir: %v, want an error saying it is not a directory", err)
	}
}

// A driver run by `nodeup job submit --working-dir` finds its job's dir in
// NODEUP_WORKING_DIR (set by the job's node) and gives it to its tasks
// without asking; an explicit JobRuntimeEnv WorkingDir would win.
func TestWorkingDirOfASubmittedJob(t *testing.T) {
	nodes := startClusterInit(t, 1, nil, JobRuntimeEnv(RuntimeEnv{WorkingDir: writeWorkingDir(t, "from job submit")}))
	cw, err := current()
	if err != nil {
		t.Fatal(err)
	}
	ref := cw.envVars[wire.EnvWorkingDir] // as the job's node would set it
	if _, _, err := wire.ParseWorkingDirRef(ref); err != nil {
		t.Fatalf("the job's env after Init: %v", err)
	}
	addr := nodes[0].SocketAddr()
	Shutdown()
	// The uploaded chunks stay in the node's cache: a new driver told the
	// ref in its environment runs its tasks in the same dir.
	t.Setenv(wire.EnvWorkingDir, ref)
	if err := Init(context.Background(), Address(addr), Logger(testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(Shutdown)
	ctx := ctxT(t)
	s, err := wdRead.Remote(ctx).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Data != "from job submit" {
		t.Fatalf("a task of a driver with %s set read %q (%s), want the job's file", wire.EnvWorkingDir, s.Data, s.Err)
	}
	Shutdown()
	t.Setenv(wire.EnvWorkingDir, "../etc@x")
	if err := Init(context.Background(), Address(addr), Logger(testutil.Logger())); err == nil || !strings.Contains(err.Error(), wire.EnvWorkingDir) {
		Shutdown()
		t.Fatalf("Init with a malformed %s: %v, want an error naming it", wire.EnvWorkingDir, err)
	}
}

// A task whose working dir no node has fails with ErrRuntimeEnvSetupFailed
// naming what is missing, as Ray's RuntimeEnvSetupError, instead of
// waiting for a worker forever; an actor's dies with that cause.
func TestWorkingDirNoNodeHasFailsTheTask(t *testing.T) {
	nodes := startCluster(t, 1, nil)
	ctx := ctxT(t)
	ref := wire.FormatWorkingDirRef(strings.Repeat("d", 64), nodes[0].RPCAddr())
	h := Must(wdRead.Options(WithRuntimeEnv(RuntimeEnv{EnvVars: map[string]string{wire.EnvWorkingDir: ref}})))
	_, err := h.Remote(ctx).Get(ctx)
	if !errors.Is(err, ErrRuntimeEnvSetupFailed) || !strings.Contains(err.Error(), "no node has it") {
		t.Fatalf("Get of a task whose working dir no node has: %v, want ErrRuntimeEnvSetupFailed saying no node has it", err)
	}
	// An actor with it dies, its cause naming the runtime env.
	a, err := Must(wdActorClass.Options(WithRuntimeEnv(RuntimeEnv{EnvVars: map[string]string{wire.EnvWorkingDir: ref}}))).Remote(ctx)
	if err == nil {
		_, err = wdActorSee.Remote(ctx, a).Get(ctx)
	}
	var died *ActorDiedError
	if !errors.As(err, &died) || !strings.Contains(err.Error(), "runtime env could not be set up") {
		t.Fatalf("an actor whose working dir no node has: %v, want *ActorDiedError naming its runtime env", err)
	}
	// The next task of the job, without that env, runs.
	if s, err := wdRead.Remote(ctx).Get(ctx); err != nil || s.Err == "" {
		t.Fatalf("a task without the working dir: %+v, %v; want it run (reading no data/in.txt)", s, err)
	}
}
