package worker

import (
	"context"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// invoker runs a registered function on msgpack-encoded arguments and returns
// its results, which the executor encodes (encodeResults).
type invoker func(ctx context.Context, args [][]byte) ([]any, error)

type registered struct {
	name       string
	numArgs    int
	numReturns int
	invoke     invoker
}

// registry is written at registration (package init) and read by every
// task a worker runs.
var registry = struct {
	sync.RWMutex
	byName map[string]*registered
}{byName: map[string]*registered{}}

// register records fn under its Go name (made unique in registration order,
// which is the same in every copy of the binary).
func register(fn any, numArgs, numReturns int, inv invoker) string {
	registry.Lock()
	defer registry.Unlock()
	name := uniqueName(registry.byName, funcName(fn))
	registry.byName[name] = &registered{name: name, numArgs: numArgs, numReturns: numReturns, invoke: inv}
	return name
}

func lookup(name string) *registered {
	registry.RLock()
	defer registry.RUnlock()
	return registry.byName[name]
}

func decodeArg[T any](b []byte, i int) (T, error) {
	var v T
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("decode argument %d as %T: %w", i, v, err)
	}
	return v, nil
}

// encodeResults encodes a task's results, and returns, per result, the IDs
// of the refs this process owns nested in it (nil when no result holds
// one): the results contain them (Ray's "contained in" references), so
// they stay while the caller holds the result.
func encodeResults(vals []any) (out [][]byte, nested [][]string, err error) {
	out = make([][]byte, len(vals))
	for i, v := range vals {
		b, in, err := marshalArg(v)
		if err != nil {
			return nil, nil, fmt.Errorf("encode result %d (%T): %w", i, v, err)
		}
		out[i] = b
		if len(in) > 0 {
			if nested == nil {
				nested = make([][]string, len(vals))
			}
			nested[i] = in
		}
	}
	return out, nested, nil
}

// Arg is a task argument of type T: a plain value (Val) or a Ref[T], whose
// value is fetched before the task runs, wherever it lives.
type Arg[T any] interface {
	argRef() (ObjectRef, bool)
	argValue() T
}

type valArg[T any] struct{ v T }

func (a valArg[T]) argRef() (ObjectRef, bool) { return nil, false }
func (a valArg[T]) argValue() T               { return a.v }

// Val wraps a plain value as an Arg, for RemoteArgs.
func Val[T any](v T) Arg[T] { return valArg[T]{v} }

func (r Ref[T]) argRef() (ObjectRef, bool) { return r, true }
func (r Ref[T]) argValue() T {
	var zero T
	return zero
}

// argOf turns an Arg into the value-or-ref form submit takes.
func argOf[T any](a Arg[T]) any {
	if r, ok := a.argRef(); ok {
		return r
	}
	return a.argValue()
}

// remote is what every typed function handle shares.
type remote struct {
	name string
	opts taskOptions // read-only once built: calls share its resource set
	err  error       // a bad option (also returned by Options), reported by every call's Get
}

func newRemote(name string) remote { return remote{name: name, opts: defaultOptions()} }

// with is f with opts applied, or with the error of the first bad one,
// which the handle keeps, so that its calls fail too if the caller of
// Options dropped the error.
func (f remote) with(opts []Option) (remote, error) {
	if f.err != nil {
		return f, f.err
	}
	o, err := applyOptions(f.opts, opts)
	if err == nil && o.actorOnly != "" {
		err = fmt.Errorf("option %s applies to actors only, not to task %s", o.actorOnly, shortName(f.name))
	}
	if err != nil {
		err = fmt.Errorf("options of %s: %w", shortName(f.name), err)
	}
	return remote{name: f.name, opts: o, err: err}, err
}

// Func0 is a registered remote function of no arguments and one result.
type Func0[R any] struct{ remote }

// Func1 is a registered remote function of one argument and one result.
type Func1[A, R any] struct{ remote }

// Func2 is a registered remote function of two arguments and one result.
type Func2[A, B, R any] struct{ remote }

// Func3 is a registered remote function of three arguments and one result.
type Func3[A, B, C, R any] struct{ remote }

// Func1x2 is a registered remote function of one argument and two results
// (Ray's num_returns=2): Remote returns two refs.
type Func1x2[A, R1, R2 any] struct{ remote }

// Func2x2 is a registered remote function of two arguments and two results.
type Func2x2[A, B, R1, R2 any] struct{ remote }

// one and two return a function's results, or pass its error on.
func one[R any](r R, err error) ([]any, error) {
	if err != nil {
		return nil, err
	}
	return []any{r}, nil
}

func two[R1, R2 any](r1 R1, r2 R2, err error) ([]any, error) {
	if err != nil {
		return nil, err
	}
	return []any{r1, r2}, nil
}

// decode2 and decode3 decode a call's leading arguments.
func decode2[A, B any](args [][]byte) (a A, b B, err error) {
	if a, err = decodeArg[A](args[0], 0); err == nil {
		b, err = decodeArg[B](args[1], 1)
	}
	return a, b, err
}

func decode3[A, B, C any](args [][]byte) (a A, b B, c C, err error) {
	if a, b, err = decode2[A, B](args); err == nil {
		c, err = decodeArg[C](args[2], 2)
	}
	return a, b, c, err
}

// Register0 registers fn as a remote function. Call it at package level (a
// var initialiser) so worker processes, which re-run the same binary, know
// fn too.
func Register0[R any](fn func(context.Context) (R, error)) Func0[R] {
	return Func0[R]{newRemote(register(fn, 0, 1, func(ctx context.Context, _ [][]byte) ([]any, error) {
		return one(fn(ctx))
	}))}
}

// Register1 registers fn as a remote function; see Register0.
func Register1[A, R any](fn func(context.Context, A) (R, error)) Func1[A, R] {
	return Func1[A, R]{newRemote(register(fn, 1, 1, func(ctx context.Context, args [][]byte) ([]any, error) {
		a, err := decodeArg[A](args[0], 0)
		if err != nil {
			return nil, err
		}
		return one(fn(ctx, a))
	}))}
}

// Register2 registers fn as a remote function; see Register0.
func Register2[A, B, R any](fn func(context.Context, A, B) (R, error)) Func2[A, B, R] {
	return Func2[A, B, R]{newRemote(register(fn, 2, 1, func(ctx context.Context, args [][]byte) ([]any, error) {
		a, b, err := decode2[A, B](args)
		if err != nil {
			return nil, err
		}
		return one(fn(ctx, a, b))
	}))}
}

// Register3 registers fn as a remote function; see Register0.
func Register3[A, B, C, R any](fn func(context.Context, A, B, C) (R, error)) Func3[A, B, C, R] {
	return Func3[A, B, C, R]{newRemote(register(fn, 3, 1, func(ctx context.Context, args [][]byte) ([]any, error) {
		a, b, c, err := decode3[A, B, C](args)
		if err != nil {
			return nil, err
		}
		return one(fn(ctx, a, b, c))
	}))}
}

// Register1x2 registers fn, a function of two results; see Register0.
func Register1x2[A, R1, R2 any](fn func(context.Context, A) (R1, R2, error)) Func1x2[A, R1, R2] {
	return Func1x2[A, R1, R2]{newRemote(register(fn, 1, 2, func(ctx context.Context, args [][]byte) ([]any, error) {
		a, err := decodeArg[A](args[0], 0)
		if err != nil {
			return nil, err
		}
		return two(fn(ctx, a))
	}))}
}

// Register2x2 registers fn, a function of two results; see Register0.
func Register2x2[A, B, R1, R2 any](fn func(context.Context, A, B) (R1, R2, error)) Func2x2[A, B, R1, R2] {
	return Func2x2[A, B, R1, R2]{newRemote(register(fn, 2, 2, func(ctx context.Context, args [][]byte) ([]any, error) {
		a, b, err := decode2[A, B](args)
		if err != nil {
			return nil, err
		}
		return two(fn(ctx, a, b))
	}))}
}

// Options returns a copy of f whose calls use opts, added after the
// options f already has (later ones win), as Ray's .options(); f itself
// is unchanged. A bad option is an error here, naming the option, the
// value and what is accepted (e.g. "options of square: option GPUs 1.5:
// above 1, GPUs must be a whole number"); the handle returned with it
// fails every call with that error. Must turns the error into a panic,
// for options written in the code.
func (f Func0[R]) Options(opts ...Option) (Func0[R], error) {
	r, err := f.with(opts)
	return Func0[R]{r}, err
}

// Options returns a copy of f whose calls use opts; see Func0.Options.
func (f Func1[A, R]) Options(opts ...Option) (Func1[A, R], error) {
	r, err := f.with(opts)
	return Func1[A, R]{r}, err
}

// Options returns a copy of f whose calls use opts; see Func0.Options.
func (f Func2[A, B, R]) Options(opts ...Option) (Func2[A, B, R], error) {
	r, err := f.with(opts)
	return Func2[A, B, R]{r}, err
}

// Options returns a copy of f whose calls use opts; see Func0.Options.
func (f Func3[A, B, C, R]) Options(opts ...Option) (Func3[A, B, C, R], error) {
	r, err := f.with(opts)
	return Func3[A, B, C, R]{r}, err
}

// Options returns a copy of f whose calls use opts; see Func0.Options.
func (f Func1x2[A, R1, R2]) Options(opts ...Option) (Func1x2[A, R1, R2], error) {
	r, err := f.with(opts)
	return Func1x2[A, R1, R2]{r}, err
}

// Options returns a copy of f whose calls use opts; see Func0.Options.
func (f Func2x2[A, B, R1, R2]) Options(opts ...Option) (Func2x2[A, B, R1, R2], error) {
	r, err := f.with(opts)
	return Func2x2[A, B, R1, R2]{r}, err
}

// Remote submits a call and returns a ref to its result.
func (f Func0[R]) Remote(ctx context.Context) Ref[R] {
	ids, owner, err := submit(ctx, f.remote, 1)
	return resultRef[R](ids[0], owner, err)
}

// Remote submits a call with a plain argument.
func (f Func1[A, R]) Remote(ctx context.Context, a A) Ref[R] {
	ids, owner, err := submit(ctx, f.remote, 1, a)
	return resultRef[R](ids[0], owner, err)
}

// RemoteArgs submits a call whose argument may be a Ref[A].
func (f Func1[A, R]) RemoteArgs(ctx context.Context, a Arg[A]) Ref[R] {
	ids, owner, err := submit(ctx, f.remote, 1, argOf(a))
	return resultRef[R](ids[0], owner, err)
}

// Remote submits a call with plain arguments.
func (f Func2[A, B, R]) Remote(ctx context.Context, a A, b B) Ref[R] {
	ids, owner, err := submit(ctx, f.remote, 1, a, b)
	return resultRef[R](ids[0], owner, err)
}

// RemoteArgs submits a call whose arguments may be refs.
func (f Func2[A, B, R]) RemoteArgs(ctx context.Context, a Arg[A], b Arg[B]) Ref[R] {
	ids, owner, err := submit(ctx, f.remote, 1, argOf(a), argOf(b))
	return resultRef[R](ids[0], owner, err)
}

// Remote submits a call with plain arguments.
func (f Func3[A, B, C, R]) Remote(ctx context.Context, a A, b B, c C) Ref[R] {
	ids, owner, err := submit(ctx, f.remote, 1, a, b, c)
	return resultRef[R](ids[0], owner, err)
}

// RemoteArgs submits a call whose arguments may be refs.
func (f Func3[A, B, C, R]) RemoteArgs(ctx context.Context, a Arg[A], b Arg[B], c Arg[C]) Ref[R] {
	ids, owner, err := submit(ctx, f.remote, 1, argOf(a), argOf(b), argOf(c))
	return resultRef[R](ids[0], owner, err)
}

// Remote submits a call and returns a ref for each result.
func (f Func1x2[A, R1, R2]) Remote(ctx context.Context, a A) (Ref[R1], Ref[R2]) {
	ids, owner, err := submit(ctx, f.remote, 2, a)
	return resultRef[R1](ids[0], owner, err), resultRef[R2](ids[1], owner, err)
}

// RemoteArgs submits a call whose argument may be a ref.
func (f Func1x2[A, R1, R2]) RemoteArgs(ctx context.Context, a Arg[A]) (Ref[R1], Ref[R2]) {
	ids, owner, err := submit(ctx, f.remote, 2, argOf(a))
	return resultRef[R1](ids[0], owner, err), resultRef[R2](ids[1], owner, err)
}

// Remote submits a call and returns a ref for each result.
func (f Func2x2[A, B, R1, R2]) Remote(ctx context.Context, a A, b B) (Ref[R1], Ref[R2]) {
	ids, owner, err := submit(ctx, f.remote, 2, a, b)
	return resultRef[R1](ids[0], owner, err), resultRef[R2](ids[1], owner, err)
}

// RemoteArgs submits a call whose arguments may be refs.
func (f Func2x2[A, B, R1, R2]) RemoteArgs(ctx context.Context, a Arg[A], b Arg[B]) (Ref[R1], Ref[R2]) {
	ids, owner, err := submit(ctx, f.remote, 2, argOf(a), argOf(b))
	return resultRef[R1](ids[0], owner, err), resultRef[R2](ids[1], owner, err)
}
