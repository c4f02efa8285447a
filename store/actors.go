package store

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
)

// ActorState and its values travel in wire.ActorInfo.State.
type ActorState = wire.ActorState

// Actor states (wire.ActorPending, ...).
const (
	ActorPending    = wire.ActorPending
	ActorAlive      = wire.ActorAlive
	ActorRestarting = wire.ActorRestarting
	ActorDead       = wire.ActorDead
)

// Actor is one actor as the leader placed and remembers it. The leader is its
// only writer; the record survives leader changes because it is Raft state.
type Actor struct {
	// ID is the actor ID (non-empty, unique, no NUL byte).
	ID string
	// JobID is the job (driver) that created it.
	JobID string
	// Class is the Go type name of the actor's value, for listings.
	Class string
	// Name and Namespace make the actor reachable by name (GetActor); Name
	// may be empty.
	Name      string
	Namespace string
	// NameKey is Namespace+"/"+Name while the actor is named and not dead,
	// else empty; set by the FSM, unique across actors.
	NameKey string
	// State is the lifecycle state; DeathCause says why it is DEAD.
	State      ActorState
	DeathCause string
	// PendingReason says why a PENDING actor has no node yet (for listings);
	// Infeasible says that no node can ever hold it (the reason says why),
	// as a placement group's Infeasible.
	PendingReason string
	Infeasible    bool
	// Detached actors outlive the job that created them (Ray's lifetime="detached").
	Detached bool
	// MaxRestarts is how often it is re-created after its worker dies (-1:
	// forever), as Ray's max_restarts; Restarts counts the restarts so far
	// and is also the incarnation number of the running instance.
	MaxRestarts int
	Restarts    int
	// MaxTaskRetries is how often a call interrupted by the actor's death is
	// retried on the restarted actor (-1: forever), as Ray's max_task_retries.
	MaxTaskRetries int
	// MaxConcurrency is how many calls run at once (1: one at a time, in
	// call order per caller), as Ray's max_concurrency.
	MaxConcurrency int
	// Resources are held on its node for its whole life (sched units).
	Resources sched.ResourceSet
	// StrategyKind, StrategyNode and StrategySoft are its scheduling
	// strategy (wire.Strategy's fields).
	StrategyKind string
	StrategyNode string
	StrategySoft bool
	// Labels are hard node-label conditions (wire.Strategy.Labels).
	Labels sched.LabelSelector `msgpack:",omitempty"`
	// SoftLabels are preferred node labels (wire.Strategy.SoftLabels).
	SoftLabels sched.LabelSelector `msgpack:",omitempty"`
	// Constructor is the registered constructor's name; Args its msgpack
	// encoded arguments (opaque here).
	Constructor string
	Args        []byte
	// BinaryHash is the sha256 of the job binary that runs it; BinaryNode the
	// RPC address of a node that has that binary.
	BinaryHash string
	BinaryNode string
	// OwnerAddr is the RPC address of the process that created it.
	OwnerAddr string
	// EnvVars are its runtime env vars (Ray's runtime_env env_vars): its
	// worker process starts with them at every incarnation.
	EnvVars map[string]string `msgpack:",omitempty"`
	// JobNamespace is the creating job's namespace (empty: the default),
	// given to its worker process for its own GetActor calls.
	JobNamespace string `msgpack:",omitempty"`
	// Language is the creating job's language (wire.LanguagePython: no
	// binary; its worker is the node's Python) and Code its class in that
	// language (opaque here; empty for Go).
	Language string `msgpack:",omitempty"`
	Code     []byte `msgpack:",omitempty"`
	// Where the running instance lives: node, worker RPC address, worker ID
	// and process ID (zero values while not ALIVE).
	NodeID     string
	NodeName   string
	NodeAddr   string
	WorkerAddr string
	WorkerID   string
	PID        int
	// NodeIncarnation is the incarnation of node NodeID whose process
	// started the running instance (0 while not ALIVE, and in records
	// written before nodes reported it). Once the node registers a higher
	// incarnation, the process that held the actor is gone: the leader
	// treats the actor as lost, as on its node's death.
	NodeIncarnation uint64 `msgpack:",omitempty"`
	// CreatedAt and StateChangedAt are unix nanoseconds stamped by the leader.
	CreatedAt      int64
	StateChangedAt int64
	// CreateIndex and ModifyIndex are Raft indexes set by the FSM.
	CreateIndex uint64
	ModifyIndex uint64
	// DeadKey orders DEAD actors for pruning (set by the FSM; empty while
	// not DEAD).
	DeadKey string `msgpack:",omitempty"`
}

// MaxDeadActors is how many DEAD actors the table keeps for listings and
// for the death cause of late calls (the oldest are dropped first; a call
// to a dropped one fails with "the cluster does not know this actor"), as
// Ray's GCS keeps a bounded number (its maximum_gcs_destroyed_actor_cached_count
// is 100,000; nodeup's records live in every snapshot, so fewer).
const MaxDeadActors = 10000

// insertActor stores a, which became what it is at index: a DEAD actor gets
// its DeadKey, and the oldest dead actors beyond MaxDeadActors are pruned.
func insertActor(txn *memdb.Txn, a *Actor, index uint64) error {
	a.DeadKey = ""
	if a.State == ActorDead {
		a.DeadKey = pruneKey(index)
	}
	if err := txn.Insert(tableActors, a); err != nil || a.State != ActorDead {
		return err
	}
	return pruneOldest(txn, tableActors, "dead", indexActorsDead, MaxDeadActors, 1)
}

// Copy returns a deep copy of a; a nil a yields nil.
func (a *Actor) Copy() *Actor {
	if a == nil {
		return nil
	}
	c := *a
	c.Resources = maps.Clone(a.Resources)
	c.Args = slices.Clone(a.Args)
	c.Labels = maps.Clone(a.Labels)
	c.EnvVars = maps.Clone(a.EnvVars)
	return &c
}

// Waiting reports whether a waits for a node: PENDING or RESTARTING.
func (a *Actor) Waiting() bool {
	return a.State == ActorPending || a.State == ActorRestarting
}

// nameKey is the unique name index value of a, "" when it has none.
func (a *Actor) nameKey() string {
	if a.Name == "" || a.State == ActorDead {
		return ""
	}
	return a.Namespace + "/" + a.Name
}

// ActorRegisterRequest records a new actor in state PENDING. When Actor.Name
// is set and a live actor of that namespace already has it, nothing is
// written: with GetIfExists the result names the existing actor, otherwise
// the result is an ErrActorNameTaken error. Errors: ErrInvalidRequest (empty
// or NUL-containing ID, an ID already used), ErrActorNameTaken.
type ActorRegisterRequest struct {
	Actor       Actor
	GetIfExists bool
}

// ActorRegisterResult is the Apply result of ActorRegister: the ID of the
// actor the caller gets, and whether it already existed.
type ActorRegisterResult struct {
	ID       string
	Existing bool
}

// ActorUpdateRequest replaces a registered actor's record (the leader's
// state transitions). DEAD is final: an update of a dead actor is an
// ErrActorDead error and changes nothing. Errors: ErrInvalidRequest,
// ErrActorNotFound, ErrActorDead, ErrActorNameTaken.
type ActorUpdateRequest struct {
	Actor Actor
}

// Actors returns every actor sorted by creation (an empty, non-nil slice if none).
func (s *StateStore) Actors() ([]*Actor, error) {
	return all(s, "actors", tableActors, "id", byActorCreation)
}

// LiveActors returns the actors that are not DEAD, in creation order,
// read through an index so dead ones cost nothing.
func (s *StateStore) LiveActors() ([]*Actor, error) {
	return all(s, "live actors", tableActors, "live", byActorCreation, true)
}

func byActorCreation(a, b *Actor) int {
	return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), cmp.Compare(a.ID, b.ID))
}

// WaitingActors returns the actors waiting for a node (PENDING or
// RESTARTING), in creation order, read through an index so the others
// cost nothing.
func (s *StateStore) WaitingActors() ([]*Actor, error) {
	return all(s, "waiting actors", tableActors, "waiting", byActorCreation, true)
}

// ActorByID returns the actor with that ID, or (nil, nil).
func (s *StateStore) ActorByID(id string) (*Actor, error) {
	return first[*Actor](s, "actor "+id, tableActors, "id", id)
}

// ActorByName returns the live (not DEAD) actor named name in namespace, or
// (nil, nil).
func (s *StateStore) ActorByName(namespace, name string) (*Actor, error) {
	return first[*Actor](s, "actor "+namespace+"/"+name, tableActors, "name", namespace+"/"+name)
}

func validActor(a *Actor) error {
	if err := validID("actor ID", a.ID); err != nil {
		return err
	}
	if !a.State.Valid() {
		return fmt.Errorf("actor %s: invalid state %q: %w", a.ID, a.State, ErrInvalidRequest)
	}
	return nil
}

// registerActor applies an ActorRegisterRequest at index.
func (s *StateStore) registerActor(index uint64, req *ActorRegisterRequest) (*ActorRegisterResult, error) {
	a := req.Actor.Copy()
	if a.State == "" {
		a.State = ActorPending
	}
	if err := validActor(a); err != nil {
		return nil, err
	}
	res := &ActorRegisterResult{ID: a.ID}
	err := s.write(index, func(txn *memdb.Txn) (bool, error) {
		if raw, err := txn.First(tableActors, "id", a.ID); err != nil || raw != nil {
			if err == nil {
				err = fmt.Errorf("actor ID %s is already used: %w", a.ID, ErrInvalidRequest)
			}
			return false, err
		}
		a.NameKey = a.nameKey()
		if a.NameKey != "" {
			raw, err := txn.First(tableActors, "name", a.NameKey)
			if err != nil {
				return false, err
			}
			if raw != nil {
				if req.GetIfExists {
					res.ID, res.Existing = raw.(*Actor).ID, true
					return false, nil
				}
				return false, fmt.Errorf("actor name %q in namespace %q belongs to actor %s: %w", a.Name, a.Namespace, raw.(*Actor).ID, ErrActorNameTaken)
			}
		}
		a.CreateIndex, a.ModifyIndex = index, index
		return true, insertActor(txn, a, index)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// updateActor applies an ActorUpdateRequest at index.
func (s *StateStore) updateActor(index uint64, req *ActorUpdateRequest) error {
	a := req.Actor.Copy()
	if err := validActor(a); err != nil {
		return err
	}
	return s.write(index, func(txn *memdb.Txn) (bool, error) {
		raw, err := txn.First(tableActors, "id", a.ID)
		if err != nil {
			return false, err
		}
		if raw == nil {
			return false, fmt.Errorf("actor %s: %w", a.ID, ErrActorNotFound)
		}
		cur := raw.(*Actor)
		if cur.State == ActorDead {
			return false, fmt.Errorf("actor %s died (%s): %w", a.ID, cur.DeathCause, ErrActorDead)
		}
		if a.Restarts < cur.Restarts {
			return false, fmt.Errorf("actor %s: incarnation %d (%s) is older than the table's %d (%s): %w",
				a.ID, a.Restarts, a.State, cur.Restarts, cur.State, ErrActorStaleIncarnation)
		}
		a.NameKey = a.nameKey()
		if a.NameKey != "" && a.NameKey != cur.NameKey {
			if raw, err := txn.First(tableActors, "name", a.NameKey); err != nil || raw != nil {
				if err == nil {
					err = fmt.Errorf("actor name %q: %w", a.NameKey, ErrActorNameTaken)
				}
				return false, err
			}
		}
		a.CreateIndex, a.ModifyIndex = cur.CreateIndex, index
		return true, insertActor(txn, a, index)
	})
}
