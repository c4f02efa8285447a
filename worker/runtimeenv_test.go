package worker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The variables the runtime env tests set; the test process itself has
// neither (checked), so any value a task sees came from a runtime env.
const (
	renvA = "RENV_A"
	renvB = "RENV_B"
)

// envSeen is what a task saw: its runtime env variables, its worker PID,
// and (for envNested) what its children saw.
type envSeen struct {
	A, B       string
	PID        int
	Child      *envSeen
	Grandchild *envSeen
}

func seeEnv() envSeen { return envSeen{A: os.Getenv(renvA), B: os.Getenv(renvB), PID: os.Getpid()} }

var (
	envTask = Register0(func(ctx context.Context) (envSeen, error) { return seeEnv(), nil })
	// envNested runs envTask as a child (inheriting) and as a child that
	// overrides B with "grandchild".
	envNested = Register0(func(ctx context.Context) (envSeen, error) {
		s := seeEnv()
		c, err := envTask.Remote(ctx).Get(ctx)
		if err != nil {
			return s, err
		}
		g, err := Must(envTask.Options(WithRuntimeEnv(RuntimeEnv{EnvVars: map[string]string{renvB: "grandchild"}}))).Remote(ctx).Get(ctx)
		if err != nil {
			return s, err
		}
		s.Child, s.Grandchild = &c, &g
		return s, nil
	})
)

// envActor reports the env its process runs with.
type envActor struct{}

func (a *envActor) Env(ctx context.Context) (envSeen, error) { return seeEnv(), nil }

// Nested runs a task from inside the actor and returns what it saw.
func (a *envActor) Nested(ctx context.Context) (envSeen, error) { return envTask.Remote(ctx).Get(ctx) }

var (
	envActorClass = RegisterActor0(func(ctx context.Context) (*envActor, error) { return &envActor{}, nil })
	envActorEnv   = RegisterMethod0((*envActor).Env)
	envActorNest  = RegisterMethod0((*envActor).Nested)
)

func withEnv(kv ...string) Option {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return WithRuntimeEnv(RuntimeEnv{EnvVars: m})
}

func startEnvCluster(t *testing.T) {
	t.Helper()
	if os.Getenv(renvA) != "" || os.Getenv(renvB) != "" {
		t.Fatalf("the test process must not have %s or %s set", renvA, renvB)
	}
	startClusterInit(t, 1, nil, JobRuntimeEnv(RuntimeEnv{EnvVars: map[string]string{renvA: "job-a", renvB: "job-b"}}))
}

func TestRuntimeEnvJobTaskAndNested(t *testing.T) {
	startEnvCluster(t)
	ctx := ctxT(t)
	get := func(f Func0[envSeen], opts ...Option) envSeen {
		t.Helper()
		s, err := Must(f.Options(opts...)).Remote(ctx).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	plain := get(envTask)
	if plain.A != "job-a" || plain.B != "job-b" {
		t.Fatalf("a task should see the job's env, saw A=%q B=%q", plain.A, plain.B)
	}
	over := get(envTask, withEnv(renvA, "task-a"))
	if over.A != "task-a" || over.B != "job-b" {
		t.Fatalf("a per-task override should win over the job's env only for its key, saw A=%q B=%q", over.A, over.B)
	}
	again := get(envTask)
	if again.A != "job-a" {
		t.Fatalf("an override must apply to that task only; a later plain task saw A=%q", again.A)
	}
	// Pooling per env: the same env shares a process, a different one not.
	if again.PID != plain.PID {
		t.Errorf("two tasks with the job's env ran in PIDs %d and %d, want one process", plain.PID, again.PID)
	}
	if over.PID == plain.PID {
		t.Errorf("tasks with different envs shared worker PID %d", over.PID)
	}
	if over2 := get(envTask, withEnv(renvA, "task-a")); over2.PID != over.PID {
		t.Errorf("two tasks with the same override ran in PIDs %d and %d, want one process", over.PID, over2.PID)
	}

	n := get(envNested, withEnv(renvA, "parent-a"))
	if n.A != "parent-a" || n.B != "job-b" {
		t.Fatalf("parent saw A=%q B=%q, want parent-a job-b", n.A, n.B)
	}
	if c := n.Child; c.A != "parent-a" || c.B != "job-b" || c.PID != n.PID {
		t.Errorf("a child should inherit its parent's effective env (and so its process): saw A=%q B=%q in PID %d (parent %d)", c.A, c.B, c.PID, n.PID)
	}
	if g := n.Grandchild; g.A != "parent-a" || g.B != "grandchild" || g.PID == n.PID {
		t.Errorf("a child's override should update its parent's env, in a process of its own: saw A=%q B=%q in PID %d (parent %d)", g.A, g.B, g.PID, n.PID)
	}
}

func TestRuntimeEnvActor(t *testing.T) {
	startEnvCluster(t)
	ctx := ctxT(t)
	h, err := Must(envActorClass.Options(withEnv(renvA, "actor-a"))).Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := envActorEnv.Remote(ctx, h).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.A != "actor-a" || s.B != "job-b" {
		t.Fatalf("actor saw A=%q B=%q, want actor-a job-b", s.A, s.B)
	}
	c, err := envActorNest.Remote(ctx, h).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.A != "actor-a" || c.B != "job-b" {
		t.Fatalf("a task submitted by the actor saw A=%q B=%q, want the actor's env", c.A, c.B)
	}
	plain, err := envActorClass.Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := envActorEnv.Remote(ctx, plain).Get(ctx); err != nil || s.A != "job-a" {
		t.Fatalf("an actor without its own env should see the job's: A=%q, %v", s.A, err)
	}
}

var badEnvKeys = []struct{ key, want string }{
	{"", "must not be empty"},
	{"A=B", "'='"},
	{"NUL\x00KEY", "NUL"},
	{"NODEUP_JOB_ID", "reserved"},
	{"CUDA_VISIBLE_DEVICES", "reserved"},
	{"NVIDIA_VISIBLE_DEVICES", "reserved"},
}

func TestRuntimeEnvOptionsRefuseBadKeys(t *testing.T) {
	for _, tc := range badEnvKeys {
		_, err := applyOptions(defaultOptions(), []Option{withEnv(tc.key, "v")})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), quoteKey(tc.key)) {
			t.Errorf("key %q: error %v should name the key and say %q", tc.key, err, tc.want)
		}
	}
	if _, err := applyOptions(defaultOptions(), []Option{withEnv("OK", "bad\x00value")}); err == nil || !strings.Contains(err.Error(), `"OK"`) {
		t.Errorf("a NUL in a value should be refused naming its key, got %v", err)
	}
	base, err := applyOptions(defaultOptions(), []Option{withEnv("X", "1")})
	if err != nil {
		t.Fatal(err)
	}
	o, err := applyOptions(base, []Option{withEnv("Y", "2"), withEnv("X", "3")})
	if err != nil || o.envVars["X"] != "3" || o.envVars["Y"] != "2" || base.envVars["X"] != "1" || len(base.envVars) != 1 {
		t.Errorf("options should merge later over earlier without touching the base handle: %v %v (%v)", o.envVars, base.envVars, err)
	}
}

// quoteKey is how errors quote a key (%q).
func quoteKey(k string) string { return fmt.Sprintf("%q", k) }

func TestRuntimeEnvInitRefusesBadKey(t *testing.T) {
	err := Init(context.Background(), JobRuntimeEnv(RuntimeEnv{EnvVars: map[string]string{"NODEUP_JOB_ID": "x"}}))
	if err == nil {
		Shutdown()
		t.Fatal("Init accepted a reserved runtime env key")
	}
	if !strings.Contains(err.Error(), `"NODEUP_JOB_ID"`) || !strings.Contains(err.Error(), "JobRuntimeEnv") {
		t.Fatalf("error should name the option and the key: %v", err)
	}
	if _, err := current(); err == nil {
		t.Fatal("a failed Init left the SDK initialised")
	}
}

func TestRuntimeEnvBadKeysAreOptionErrors(t *testing.T) {
	for _, tc := range badEnvKeys {
		if _, err := square.Options(withEnv(tc.key, "v")); err == nil || !strings.Contains(err.Error(), quoteKey(tc.key)) {
			t.Errorf("task with env key %q: Options should fail naming the key, got %v", tc.key, err)
		}
		if _, err := envActorClass.Options(withEnv(tc.key, "v")); err == nil || !strings.Contains(err.Error(), quoteKey(tc.key)) {
			t.Errorf("actor with env key %q: Options should fail naming the key, got %v", tc.key, err)
		}
	}
}
