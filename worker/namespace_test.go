package worker

import (
	"context"
	"testing"
)

// nsProbe looks actors up by name from inside an actor.
type nsProbe struct{}

var (
	nsProbeClass = RegisterActor0(func(ctx context.Context) (*nsProbe, error) { return &nsProbe{}, nil })
	nsFindCall   = RegisterMethod1((*nsProbe).Find)
)

// Find returns the ID of the actor named name in this job's namespace.
func (p *nsProbe) Find(ctx context.Context, name string) (string, error) {
	h, err := GetActor[logActor](ctx, name)
	if err != nil {
		return "", err
	}
	return h.ID(), nil
}

// TestActorsLookUpNamesInTheirJobsNamespace: GetActor inside an actor
// defaults to the namespace of the job that created it, as the driver's
// does, even when the actor itself was named into another namespace.
func TestActorsLookUpNamesInTheirJobsNamespace(t *testing.T) {
	startClusterInit(t, 1, nil, JobNamespace("lab"))
	ctx := ctxT(t)
	target, err := Must(logActorClass.Options(Name("registry"))).Remote(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := Must(nsProbeClass.Options(Name("probe"), Namespace("elsewhere"))).Remote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := nsFindCall.Remote(ctx, probe, "registry").Get(ctx)
	if err != nil || id != target.ID() {
		t.Fatalf("GetActor(registry) inside an actor of job namespace lab = %q, %v; want %s", id, err, target.ID())
	}
}
