package worker

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/wire"
)

// constructor builds an actor's value from msgpack-encoded arguments.
type constructor func(ctx context.Context, args [][]byte) (any, error)

// methodInvoker runs a method on an actor's value.
type methodInvoker func(inst any, ctx context.Context, args [][]byte) ([]any, error)

type ctorEntry struct {
	name      string
	class     string
	numArgs   int
	construct constructor
}

type methodEntry struct {
	name       string
	numArgs    int
	numReturns int
	invoke     methodInvoker
}

var actorRegistry = struct {
	sync.RWMutex
	ctors   map[string]*ctorEntry
	methods map[string]*methodEntry
}{ctors: map[string]*ctorEntry{}, methods: map[string]*methodEntry{}}

// funcName is fn's Go name, under which it is registered.
func funcName(fn any) string { return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name() }

// uniqueName makes name unique in taken (registration order is the same in
// every copy of the binary, so every copy picks the same names): name, else
// name#2, name#3, ...
func uniqueName[V any](taken map[string]V, name string) string {
	base := name
	for i := 2; ; i++ {
		if _, ok := taken[name]; !ok {
			return name
		}
		name = fmt.Sprintf("%s#%d", base, i)
	}
}

func registerCtor[T any](fn any, numArgs int, c constructor) actorClass {
	var zero T
	class := reflect.TypeOf(zero).Name()
	actorRegistry.Lock()
	defer actorRegistry.Unlock()
	name := uniqueName(actorRegistry.ctors, funcName(fn))
	actorRegistry.ctors[name] = &ctorEntry{name: name, class: class, numArgs: numArgs, construct: c}
	return actorClass{ctor: name, class: class, opts: defaultActorOptions()}
}

func registerMethod(fn any, numArgs int, inv methodInvoker) string {
	actorRegistry.Lock()
	defer actorRegistry.Unlock()
	name := uniqueName(actorRegistry.methods, funcName(fn))
	actorRegistry.methods[name] = &methodEntry{name: name, numArgs: numArgs, numReturns: 1, invoke: inv}
	return name
}

func lookupCtor(name string) *ctorEntry {
	actorRegistry.RLock()
	defer actorRegistry.RUnlock()
	return actorRegistry.ctors[name]
}

func lookupMethod(name string) *methodEntry {
	actorRegistry.RLock()
	defer actorRegistry.RUnlock()
	return actorRegistry.methods[name]
}

// actorClass is what every typed actor class shares: its constructor's
// registered name, the Go type name, and creation options.
type actorClass struct {
	ctor  string
	class string
	opts  taskOptions
	err   error
}

// with is c with opts applied, or with the error of the first bad one,
// which the class keeps, so that its Remote fails too if the caller of
// Options dropped the error.
func (c actorClass) with(opts []Option) (actorClass, error) {
	if c.err != nil {
		return c, c.err
	}
	o, err := applyOptions(c.opts, opts)
	if err != nil {
		err = fmt.Errorf("options of actor %s: %w", c.class, err)
	}
	return actorClass{ctor: c.ctor, class: c.class, opts: o, err: err}, err
}

// ActorClass0 is a registered actor type T built by a constructor of no
// arguments. Create instances with Remote.
type ActorClass0[T any] struct{ actorClass }

// ActorClass1 is a registered actor type T built from one argument.
type ActorClass1[A, T any] struct{ actorClass }

// ActorClass2 is a registered actor type T built from two arguments.
type ActorClass2[A, B, T any] struct{ actorClass }

// RegisterActor0 registers ctor as the constructor of actor type T (Ray's
// @ray.remote on a class). Call it at package level (a var initialiser), as
// Register0, so worker processes know it too; register T's remote methods
// with RegisterMethod0..3.
func RegisterActor0[T any](ctor func(context.Context) (*T, error)) ActorClass0[T] {
	return ActorClass0[T]{registerCtor[T](ctor, 0, func(ctx context.Context, _ [][]byte) (any, error) { return ctor(ctx) })}
}

// RegisterActor1 registers a one-argument constructor; see RegisterActor0.
func RegisterActor1[A, T any](ctor func(context.Context, A) (*T, error)) ActorClass1[A, T] {
	return ActorClass1[A, T]{registerCtor[T](ctor, 1, func(ctx context.Context, args [][]byte) (any, error) {
		a, err := decodeArg[A](args[0], 0)
		if err != nil {
			return nil, err
		}
		return ctor(ctx, a)
	})}
}

// RegisterActor2 registers a two-argument constructor; see RegisterActor0.
func RegisterActor2[A, B, T any](ctor func(context.Context, A, B) (*T, error)) ActorClass2[A, B, T] {
	return ActorClass2[A, B, T]{registerCtor[T](ctor, 2, func(ctx context.Context, args [][]byte) (any, error) {
		a, b, err := decode2[A, B](args)
		if err != nil {
			return nil, err
		}
		return ctor(ctx, a, b)
	})}
}

// Options returns a copy of c whose instances are created with opts:
// resources (CPUs, GPUs, Memory, Resources), Name, Namespace, GetIfExists,
// Detached, MaxRestarts, MaxTaskRetries, MaxConcurrency, WithRuntimeEnv,
// and the scheduling strategies (Spread, NodeAffinity, NodeLabels,
// InPlacementGroup). A bad option is an error here, naming the option,
// the value and what is accepted; the class returned with it fails Remote
// with that error. See Func0.Options and Must.
func (c ActorClass0[T]) Options(opts ...Option) (ActorClass0[T], error) {
	ac, err := c.with(opts)
	return ActorClass0[T]{ac}, err
}

// Options returns a copy of c whose instances are created with opts; see
// ActorClass0.Options.
func (c ActorClass1[A, T]) Options(opts ...Option) (ActorClass1[A, T], error) {
	ac, err := c.with(opts)
	return ActorClass1[A, T]{ac}, err
}

// Options returns a copy of c whose instances are created with opts; see
// ActorClass0.Options.
func (c ActorClass2[A, B, T]) Options(opts ...Option) (ActorClass2[A, B, T], error) {
	ac, err := c.with(opts)
	return ActorClass2[A, B, T]{ac}, err
}

// Remote creates an actor and returns its handle once the cluster leader has
// registered it (one Raft write; an unnamed actor's registration itself runs
// in the background); the actor is placed and constructed in the background,
// and calls made meanwhile wait for it. Errors: a bad option, a name taken
// (without GetIfExists), no leader reachable (for an unnamed actor, reported
// by its calls).
func (c ActorClass0[T]) Remote(ctx context.Context) (ActorHandle[T], error) {
	return createActor[T](ctx, c.actorClass)
}

// Remote creates an actor from a plain argument; see ActorClass0.Remote.
func (c ActorClass1[A, T]) Remote(ctx context.Context, a A) (ActorHandle[T], error) {
	return createActor[T](ctx, c.actorClass, a)
}

// RemoteArgs creates an actor from an argument that may be a Ref[A].
func (c ActorClass1[A, T]) RemoteArgs(ctx context.Context, a Arg[A]) (ActorHandle[T], error) {
	return createActor[T](ctx, c.actorClass, argOf(a))
}

// Remote creates an actor from plain arguments; see ActorClass0.Remote.
func (c ActorClass2[A, B, T]) Remote(ctx context.Context, a A, b B) (ActorHandle[T], error) {
	return createActor[T](ctx, c.actorClass, a, b)
}

// RemoteArgs creates an actor from arguments that may be refs.
func (c ActorClass2[A, B, T]) RemoteArgs(ctx context.Context, a Arg[A], b Arg[B]) (ActorHandle[T], error) {
	return createActor[T](ctx, c.actorClass, argOf(a), argOf(b))
}

func createActor[T any](ctx context.Context, c actorClass, args ...any) (ActorHandle[T], error) {
	var h ActorHandle[T]
	if c.err != nil {
		return h, c.err // a bad option, returned by Options already
	}
	cw, err := current()
	if err != nil {
		return h, err
	}
	o := c.opts
	wargs, nested, err := cw.encodeArgs(ctx, "actor", c.class, args)
	if err != nil {
		return h, err
	}
	// A restart runs the constructor again with the same arguments: they
	// are kept until the job ends.
	for _, id := range append(cw.ownedArgs(wargs), nested...) {
		cw.objects.pin(id)
	}
	runtime.KeepAlive(args)
	ns := o.namespace
	if ns == "" {
		ns = cw.namespace
	}
	req := &wire.ActorCreateRequest{JobID: cw.jobID, Class: c.class, Name: o.name, Namespace: ns, GetIfExists: o.getIfExists,
		Detached: o.detached, MaxRestarts: o.maxRestarts, MaxTaskRetries: o.maxTaskRetries, MaxConcurrency: o.maxConcurrency,
		Resources: o.demandSet(), Strategy: o.strategy, Constructor: c.ctor, Args: wargs, BinaryHash: cw.binHash, BinaryNode: cw.nodeAddr,
		OwnerAddr: cw.addr}
	req.EnvVars = cw.envFor(o.envVars)
	if cw.namespace != DefaultNamespace {
		req.JobNamespace = cw.namespace
	}
	if o.name == "" {
		// Unnamed: nothing to check against other actors, so the ID is made
		// here and the registration runs in the background (as Ray returns
		// the handle at once); calls wait for it, and a failed registration
		// fails them.
		req.ActorID = randomHex(12)
		conn := cw.actors.conn(req.ActorID, c.class)
		conn.created = make(chan struct{})
		go func() {
			defer close(conn.created)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := cw.pool.Call(cctx, cw.nodeAddr, wire.MethodActorCreate, req, nil); err != nil {
				conn.createErr = fmt.Errorf("create actor %s: %w", c.class, err)
			}
		}()
		return ActorHandle[T]{id: req.ActorID, class: c.class}, nil
	}
	var rep wire.ActorCreateReply
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodActorCreate, req, &rep); err != nil {
		return h, fmt.Errorf("create actor %s: %w", c.class, err)
	}
	return ActorHandle[T]{id: rep.ActorID, class: c.class}, nil
}

// ActorHandle refers to an actor of type T. It may be copied, passed to
// tasks and other actors as an argument or inside values (it travels as
// [id, class]), and used from any process of the cluster.
type ActorHandle[T any] struct {
	id    string
	class string
}

// ID returns the actor ID.
func (h ActorHandle[T]) ID() string { return h.id }

// Class returns the actor's Go type name.
func (h ActorHandle[T]) Class() string { return h.class }

// String implements fmt.Stringer.
func (h ActorHandle[T]) String() string { return fmt.Sprintf("Actor(%s, %s)", h.class, h.id) }

// EncodeMsgpack writes the handle as [id, class].
func (h ActorHandle[T]) EncodeMsgpack(enc *msgpack.Encoder) error {
	return encodePair(enc, h.id, h.class)
}

// DecodeMsgpack reads what EncodeMsgpack wrote.
func (h *ActorHandle[T]) DecodeMsgpack(dec *msgpack.Decoder) (err error) {
	h.id, h.class, err = decodePair(dec, "actor handle: want [id, class]")
	return err
}

// GetActor returns the live actor named name in the driver's namespace (see
// JobNamespace), as ray.get_actor. The error names the name and namespace
// when there is none.
func GetActor[T any](ctx context.Context, name string) (ActorHandle[T], error) {
	cw, err := current()
	if err != nil {
		return ActorHandle[T]{}, err
	}
	return GetActorIn[T](ctx, cw.namespace, name)
}

// GetActorIn returns the live actor named name in namespace.
func GetActorIn[T any](ctx context.Context, namespace, name string) (ActorHandle[T], error) {
	var h ActorHandle[T]
	cw, err := current()
	if err != nil {
		return h, err
	}
	var info wire.ActorInfo
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodActorGet, &wire.ActorGetRequest{Namespace: namespace, Name: name}, &info); err != nil {
		return h, fmt.Errorf("get actor %q: %w", name, err)
	}
	var zero T
	if c := reflect.TypeOf(zero).Name(); c != info.Class {
		return h, fmt.Errorf("get actor %q: it is a %s, not a %s", name, info.Class, c)
	}
	return ActorHandle[T]{id: info.ActorID, class: info.Class}, nil
}

// Kill ends the actor (Ray's ray.kill): with noRestart it is DEAD at once
// and its pending and later calls fail with *ActorDiedError; otherwise its
// worker is killed and it restarts if it has restarts left.
func Kill[T any](ctx context.Context, h ActorHandle[T], noRestart bool) error {
	cw, err := current()
	if err != nil {
		return err
	}
	if err := cw.actors.conn(h.id, h.class).waitCreated(ctx); err != nil {
		return fmt.Errorf("kill actor %s: %w", h.id, err)
	}
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodActorKill, &wire.ActorKillRequest{ActorID: h.id, NoRestart: noRestart}, nil); err != nil {
		return fmt.Errorf("kill actor %s: %w", h.id, err)
	}
	return nil
}

// ActorInfo is one actor as ListActors reports it (Ray's state API
// list_actors): its state (PENDING, ALIVE, RESTARTING, DEAD), where it runs,
// and why it died or waits.
type ActorInfo struct {
	ActorID       string
	Class         string
	Name          string
	Namespace     string
	JobID         string
	State         string
	DeathCause    string
	PendingReason string
	Infeasible    bool // no node can ever hold it (PendingReason says why)
	Detached      bool
	Restarts      int
	NodeID        string
	NodeName      string
	PID           int
}

// ListActors returns every actor the cluster remembers, in creation order.
func ListActors(ctx context.Context) ([]ActorInfo, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	var list wire.ActorList
	if err := cw.pool.Call(ctx, cw.nodeAddr, wire.MethodActorList, &wire.Empty{}, &list); err != nil {
		return nil, fmt.Errorf("list actors: %w", err)
	}
	out := make([]ActorInfo, len(list.Actors))
	for i, a := range list.Actors {
		out[i] = ActorInfo{ActorID: a.ActorID, Class: a.Class, Name: a.Name, Namespace: a.Namespace, JobID: a.JobID, State: a.State,
			DeathCause: a.DeathCause, PendingReason: a.PendingReason, Infeasible: a.Infeasible != nil, Detached: a.Detached, Restarts: a.Incarnation,
			NodeID: a.NodeID, NodeName: a.NodeName, PID: a.PID}
	}
	return out, nil
}
