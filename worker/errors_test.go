package worker

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// sentinels maps each protocol code to the SDK error users test for it;
// the codes only package rpc sets map to none.
var sentinels = map[string]error{
	wire.CodeNotFound: ErrNotFound, wire.CodeAlreadyExists: ErrAlreadyExists, wire.CodeInfeasible: ErrInfeasible,
	wire.CodeNotLeader: ErrNotLeader, wire.CodeNoLeader: ErrNoLeader, wire.CodeBadInput: ErrBadInput,
	wire.CodePermissionDenied: ErrPermissionDenied, wire.CodeObjectLost: ErrObjectLost, wire.CodeOwnerDied: ErrOwnerDied,
	wire.CodeActorDied: ErrActorDied, wire.CodeStaleIncarnation: ErrStaleIncarnation, wire.CodeWorkerCrashed: ErrWorkerCrashed,
	wire.CodeWorkerFailed: ErrWorkerFailed, wire.CodeRuntimeEnvSetupFailed: ErrRuntimeEnvSetupFailed, wire.CodeTimeout: ErrTimeout, wire.CodeCancelled: ErrCancelled,
	wire.CodeLeaseRevoked: ErrLeaseRevoked, wire.CodeObjectStoreFull: ErrObjectStoreFull, wire.CodeOverloaded: ErrOverloaded,
	wire.CodeUnknownMethod: nil, wire.CodeBadRequest: nil, wire.CodeInternal: nil,
}

// Every code maps to exactly its sentinel through errors.Is, however the
// error answered with it is wrapped, and docs/protocol.md lists it.
func TestEveryCodeMapsToItsSentinel(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range wire.Codes {
		want, ok := sentinels[code]
		if !ok {
			t.Errorf("code %q has no entry here: give it an SDK sentinel", code)
		}
		if !strings.Contains(string(doc), "| `"+code+"` |") {
			t.Errorf("docs/protocol.md does not list code %q in its table", code)
		}
		err := fmt.Errorf("call: %w", &rpc.Error{Code: code, Message: "m"})
		for c, s := range sentinels {
			if s != nil && errors.Is(err, s) != (s == want) {
				t.Errorf("errors.Is(error of code %q, sentinel of %q) = %v", code, c, !(s == want))
			}
		}
	}
	if errors.Is(&rpc.Error{Message: "uncategorised"}, ErrNotFound) {
		t.Error("an error without a code matches ErrNotFound")
	}
}

// The typed errors match their code's sentinel; *InfeasibleError is the one
// infeasible type, matching sched.ErrInfeasible too.
func TestTypedErrorsMatchTheirSentinels(t *testing.T) {
	for _, c := range []struct {
		err  error
		want []error
	}{
		{&InfeasibleError{TaskName: "t", Reason: "no GPU"}, []error{ErrInfeasible, sched.ErrInfeasible}},
		{&ActorDiedError{ActorID: "a"}, []error{ErrActorDied}},
		{&WorkerCrashedError{TaskName: "t"}, []error{ErrWorkerCrashed}},
		{&ObjectLostError{ObjectID: "o"}, []error{ErrObjectLost}},
		{&ObjectFreedError{ObjectID: "o"}, []error{ErrObjectLost}},
		{&OwnerDiedError{ObjectID: "o", Owner: "127.0.0.1:1"}, []error{ErrOwnerDied, ErrObjectLost}},
	} {
		wrapped := fmt.Errorf("get: %w", c.err)
		for _, w := range c.want {
			if !errors.Is(wrapped, w) {
				t.Errorf("errors.Is(%T, %v) = false", c.err, w)
			}
		}
		if errors.Is(wrapped, ErrNotFound) {
			t.Errorf("%T matches ErrNotFound", c.err)
		}
	}
	if errors.Is(&ObjectLostError{ObjectID: "o", Reason: "freed"}, ErrOwnerDied) {
		t.Error("an object lost with its owner alive matches ErrOwnerDied")
	}
}
