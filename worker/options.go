package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// Option sets one task or actor option, as the keyword arguments of Ray's
// .options(). Give options to Options (of a FuncN or an ActorClassN), which
// returns the first bad one's error, or to NewQueue and NewSignal.
type Option func(*taskOptions) error

// Must returns h, or panics with err: for options written in the program,
// whose error is a bug, as regexp.MustCompile and template.Must, e.g.
// worker.Must(square.Options(worker.CPUs(2))).Remote(ctx, 5). Check the
// error of Options instead where option values come from input.
func Must[H any](h H, err error) H {
	if err != nil {
		panic(err)
	}
	return h
}

type taskOptions struct {
	res              sched.ResourceSet
	name             string
	maxRetries       int
	retryExceptions  bool
	strategy         wire.Strategy
	failIfInfeasible bool
	key              string // scheduling key: resources + strategy, derived once per handle
	pg               *PlacementGroup
	bundle           int               // bundle index in pg (-1: any)
	demand           sched.ResourceSet // res as asked of the scheduler (renamed into pg's bundle), derived

	// Actor options (Ray's actor .options()); actorOnly names the last one
	// set, so a task handle given one can say which.
	namespace      string
	getIfExists    bool
	detached       bool
	maxRestarts    int
	maxTaskRetries int
	maxConcurrency int
	actorOnly      string

	// envVars are the handle's own runtime env vars (WithRuntimeEnv),
	// merged over the submitting process's when its tasks' queue or its
	// actor is made (envFor); envKey is their canonical form (envKeyOf),
	// derived.
	envVars map[string]string
	envKey  string
}

// defaultActorOptions: an actor holds no CPU unless asked (Ray schedules an
// actor with 1 CPU but runs it with 0; holding none lets a small machine
// host many actors), is not restarted, and runs one call at a time.
func defaultActorOptions() taskOptions {
	return taskOptions{res: sched.ResourceSet{}, maxConcurrency: 1}
}

func defaultOptions() taskOptions {
	o := taskOptions{res: sched.ResourceSet{sched.CPU: sched.Unit}, maxRetries: 3}
	o.key = schedKey(o.res, o.strategy)
	return o
}

// schedKey groups tasks that can share a worker lease.
func schedKey(res sched.ResourceSet, st wire.Strategy) string {
	return res.String() + "|" + st.Kind + "|" + st.NodeID + fmt.Sprint(st.Soft) + "|" + st.Labels.String() + "|" + st.SoftLabels.String()
}

// setQuantity sets resource name to v units (0: no demand); errors name
// the resource as the option.
func setQuantity(o *taskOptions, name string, v float64) error { return setAmount(o, name, name, v) }

// setAmount is setQuantity for the option named option ("CPUs", or
// `Resources "TPU"`), which its errors name, with the value and what is
// accepted.
func setAmount(o *taskOptions, option, name string, v float64) error {
	q, err := sched.QuantityFromFloat(v)
	if err != nil {
		return fmt.Errorf("option %s: %w", option, err)
	}
	if q == 0 {
		delete(o.res, name)
		return nil
	}
	o.res[name] = q
	return nil
}

// CPUs sets the CPU units a task holds while it runs (default 1; 0 is allowed).
func CPUs(n float64) Option {
	return func(o *taskOptions) error { return setAmount(o, "CPUs", sched.CPU, n) }
}

// GPUs sets the GPU units a task holds (fractions share a device; above 1,
// whole numbers only, as Ray).
func GPUs(n float64) Option {
	return func(o *taskOptions) error {
		if n > 1 && n != float64(int64(n)) {
			return fmt.Errorf("option GPUs %v: above 1, GPUs must be a whole number", n)
		}
		return setAmount(o, "GPUs", sched.GPU, n)
	}
}

// Memory sets the memory a task reserves, in bytes.
func Memory(bytes int64) Option {
	return func(o *taskOptions) error {
		if bytes < 0 {
			return fmt.Errorf("option Memory %d: must not be negative", bytes)
		}
		return setAmount(o, "Memory", sched.Memory, float64(bytes))
	}
}

// Resources adds custom resource demands ({"TPU-v3": 1, "node0": 0.5}),
// as Ray's resources={...}. Amounts have at most 4 decimals. Errors (for
// the first bad entry in name order): a bad resource name; a negative,
// NaN, infinite or over-precise amount.
func Resources(r map[string]float64) Option {
	return func(o *taskOptions) error {
		for _, name := range slices.Sorted(maps.Keys(r)) {
			v := r[name]
			if err := sched.ValidateResourceName(name); err != nil {
				return fmt.Errorf("option Resources: %w", err)
			}
			if err := setAmount(o, fmt.Sprintf("Resources %q", name), name, v); err != nil {
				return err
			}
		}
		return nil
	}
}

// Name names the task in logs, errors and listings (default: the function
// name). For an actor it is the actor's name in its namespace, by which any
// driver finds it with GetActor (as Ray's name=).
func Name(name string) Option { return func(o *taskOptions) error { o.name = name; return nil } }

func actorOption(name string, set func(o *taskOptions) error) Option {
	return func(o *taskOptions) error {
		o.actorOnly = name
		return set(o)
	}
}

// Namespace sets the namespace of a named actor (default: the driver's, see
// JobNamespace), as Ray's namespace=.
func Namespace(ns string) Option {
	return actorOption("Namespace", func(o *taskOptions) error { o.namespace = ns; return nil })
}

// GetIfExists makes creating a named actor return the live actor of that
// name instead of failing (Ray's get_if_exists=True).
func GetIfExists() Option {
	return actorOption("GetIfExists", func(o *taskOptions) error { o.getIfExists = true; return nil })
}

// Detached makes an actor outlive the job that created it (Ray's
// lifetime="detached"); it lives until Kill. By default an actor dies when
// its creating job finishes.
func Detached() Option {
	return actorOption("Detached", func(o *taskOptions) error { o.detached = true; return nil })
}

// MaxRestarts sets how often an actor is re-created (its constructor runs
// again) after its worker process or node dies: default 0, -1 forever, as
// Ray's max_restarts.
func MaxRestarts(n int) Option {
	return actorOption("MaxRestarts", func(o *taskOptions) error { return setCount(&o.maxRestarts, "MaxRestarts", n) })
}

// MaxTaskRetries sets how often a method call cut off by its actor's death
// is retried on the restarted actor: default 0 (the call fails with
// *ActorDiedError), -1 forever, as Ray's max_task_retries.
func MaxTaskRetries(n int) Option {
	return actorOption("MaxTaskRetries", func(o *taskOptions) error { return setCount(&o.maxTaskRetries, "MaxTaskRetries", n) })
}

// MaxConcurrency sets how many of an actor's calls run at once: 1 (the
// default) runs them one at a time, in call order per caller; above 1 they
// run concurrently as goroutines, in no set order (Ray's max_concurrency).
func MaxConcurrency(n int) Option {
	return actorOption("MaxConcurrency", func(o *taskOptions) error {
		if n < 1 {
			return fmt.Errorf("option MaxConcurrency %d: must be at least 1", n)
		}
		o.maxConcurrency = n
		return nil
	})
}

// MaxRetries sets how often a task is retried when its worker or node dies
// (default 3, as Ray's max_retries; -1: forever).
func MaxRetries(n int) Option {
	return func(o *taskOptions) error { return setCount(&o.maxRetries, "MaxRetries", n) }
}

// setCount sets a retry or restart count option: -1 (forever) or more.
func setCount(field *int, option string, n int) error {
	if n < -1 {
		return fmt.Errorf("option %s %d: use -1 (forever) or more", option, n)
	}
	*field = n
	return nil
}

// RetryExceptions makes a task's own errors and panics count as retryable
// too (Ray's retry_exceptions; default false).
func RetryExceptions(on bool) Option {
	return func(o *taskOptions) error { o.retryExceptions = on; return nil }
}

// Spread places tasks round robin over the feasible nodes (alive, totals
// covering the demand, labels matching), one lease per task, so a burst
// lands evenly (Ray's scheduling_strategy="SPREAD"). Actors with Spread go
// round robin too, placed by the leader (sched.Decide).
func Spread() Option {
	return func(o *taskOptions) error {
		o.strategy.Kind, o.strategy.NodeID, o.strategy.Soft, o.strategy.SoftLabels = wire.StrategySpread, "", false, nil
		return nil
	}
}

// NodeAffinity runs the task on the node with this ID (hex, as NodeID and
// Nodes report it); soft falls back to other nodes when that node is gone
// or cannot run it (Ray's NodeAffinitySchedulingStrategy). Error: an ID
// that is not 8 to 64 hex digits (a node's name is not its ID).
func NodeAffinity(nodeID string, soft bool) Option {
	return func(o *taskOptions) error {
		if !isNodeID(nodeID) {
			return fmt.Errorf("option NodeAffinity %q: not a node ID; give 8 to 64 hex digits as NodeID() and Nodes() report (a node's name is not its ID)", nodeID)
		}
		o.strategy.Kind, o.strategy.NodeID, o.strategy.Soft, o.strategy.SoftLabels = wire.StrategyNodeAffinity, nodeID, soft, nil
		return nil
	}
}

// isNodeID reports whether id has the form of a node ID: 8 to 64
// lower-case hex digits.
func isNodeID(id string) bool {
	return len(id) >= 8 && len(id) <= 64 && strings.Trim(id, "0123456789abcdef") == ""
}

// AcceleratorType runs the task or actor only on nodes whose GPUs are of
// this model, in Ray's short names ("H100", "A100", "V100"; see
// docs/gpus.md), by adding a demand of 0.001 of the node resource
// accelerator_type:<model>, as Ray's accelerator_type option. Error: an
// empty name.
func AcceleratorType(model string) Option {
	return func(o *taskOptions) error {
		if strings.TrimSpace(model) == "" {
			return fmt.Errorf("option AcceleratorType %q: give a GPU model such as \"H100\"", model)
		}
		return setQuantity(o, sched.AcceleratorTypeResource(model), 0.001)
	}
}

// RuntimeEnv is the environment a job, task or actor runs in, as Ray's
// runtime_env: env_vars and working_dir map onto Go programs (pip and
// conda are Python's).
//
// A runtime env is inherited: a task or actor runs with its parent's
// effective env (the job's, set with JobRuntimeEnv, for work the driver
// submits; the running task's or actor's for work submitted from inside
// one) updated with its own EnvVars and WorkingDir, key by key, as Ray
// merges a child's runtime_env into its parent's with a dict update.
type RuntimeEnv struct {
	// EnvVars are environment variables set in the worker process that runs
	// the task or actor (Ray's env_vars), so os.Getenv sees them. Keys must
	// be non-empty and contain no '=' or NUL byte, values no NUL byte; keys
	// nodeup sets itself (NODEUP_*, CUDA_VISIBLE_DEVICES,
	// NVIDIA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER) are refused, but for
	// NODEUP_WORKING_DIR holding a working dir's ref in its wire form
	// (docs/protocol.md; WorkingDir makes one). An empty value sets the
	// variable to "" (it does not unset it).
	EnvVars map[string]string
	// WorkingDir is a local directory whose content every worker process
	// of the task or actor starts in, on any node (Ray's working_dir), so
	// files shipped with the job are read by relative path everywhere. It
	// is packed and uploaded to this process's node when the option is
	// first applied (Init for JobRuntimeEnv, Options for WithRuntimeEnv;
	// once per process and dir, so later edits are not seen), at most the
	// node's --max-working-dir (default 100 MiB); each node
	// fetches it from there (or from any node that has it) and unpacks it
	// once. A driver run by `nodeup job submit --working-dir` has its
	// job's dir by default. The driver's own current directory is not
	// changed.
	WorkingDir string
}

// validate checks every variable (wire.ValidateEnvVar), naming the
// first bad key in key order.
func (e RuntimeEnv) validate() error { return wire.ValidateEnvVars(e.EnvVars) }

// WithRuntimeEnv runs the task or actor with env's EnvVars and WorkingDir
// set over its parent's effective runtime env (see RuntimeEnv), as Ray's
// .options(runtime_env=...). Given more than once, later variables win.
// Tasks with different effective envs run in different worker processes;
// tasks with the same one share them. A WorkingDir is uploaded here (the
// first time this process names it), so Init must have run. Errors: a bad variable, named;
// a WorkingDir that cannot be packed or uploaded.
func WithRuntimeEnv(env RuntimeEnv) Option {
	return func(o *taskOptions) error {
		if err := env.validate(); err != nil {
			return fmt.Errorf("option WithRuntimeEnv: %w", err)
		}
		vars := env.EnvVars
		if env.WorkingDir != "" {
			cw, err := current()
			if err != nil {
				return fmt.Errorf("option WithRuntimeEnv: working dir %s: %w", env.WorkingDir, err)
			}
			ctx, cancel := context.WithTimeout(cw.ctx, workingDirUploadTimeout)
			ref, err := cw.uploadWorkingDir(ctx, env.WorkingDir)
			cancel()
			if err != nil {
				return fmt.Errorf("option WithRuntimeEnv: %w", err)
			}
			vars = maps.Clone(vars)
			if vars == nil {
				vars = map[string]string{}
			}
			vars[wire.EnvWorkingDir] = ref
		}
		if len(vars) == 0 {
			return nil
		}
		m := maps.Clone(o.envVars) // o shares its map with the handle it came from
		if m == nil {
			m = make(map[string]string, len(vars))
		}
		maps.Copy(m, vars)
		o.envVars = m
		return nil
	}
}

// FailIfInfeasible makes a task that no node can ever run fail with
// *InfeasibleError instead of waiting for the cluster to grow.
func FailIfInfeasible() Option {
	return func(o *taskOptions) error { o.failIfInfeasible = true; return nil }
}

// applyOptions returns base with opts applied, evaluated once per handle
// (Options), not per call, so Remote does no option work.
func applyOptions(base taskOptions, opts []Option) (taskOptions, error) {
	o := base
	o.res = base.res.Clone()
	for _, fn := range opts {
		if err := fn(&o); err != nil {
			return o, err
		}
	}
	o.demand = nil
	if o.pg != nil {
		if o.strategy.Kind != wire.StrategyDefault {
			return o, fmt.Errorf("option InPlacementGroup cannot be combined with %s: work in a placement group runs on its bundle's node", strategyOption[o.strategy.Kind])
		}
		o.demand = sched.PlacementGroupDemand(o.pg.id, o.bundle, o.res)
	}
	o.key = schedKey(o.demandSet(), o.strategy)
	o.envKey = envKeyOf(o.envVars)
	return o, nil
}

// strategyOption names the option that sets each strategy kind, for errors.
var strategyOption = map[string]string{wire.StrategySpread: "Spread", wire.StrategyNodeAffinity: "NodeAffinity"}

// demandSet is what the scheduler is asked for: the resources, renamed into
// the placement group's bundle when the task or actor runs in one.
func (o *taskOptions) demandSet() sched.ResourceSet {
	if o.demand != nil {
		return o.demand
	}
	return o.res
}

// envKeyOf is vars as sorted KEY=VALUE entries joined by NUL ("" for none):
// keys hold no '=' or NUL and values no NUL, so equal keys mean equal envs.
func envKeyOf(vars map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(vars[k])
		b.WriteByte(0)
	}
	return b.String()
}
