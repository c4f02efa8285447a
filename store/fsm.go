package store

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/hashicorp/raft"
)

// errApplyPanic marks the error result of an Apply that recovered from a
// panic (a bug, not bad input); tests check that it never happens.
var errApplyPanic = errors.New("panic while applying")

// FSM is nodeup's replicated state machine: it implements raft.FSM over a
// StateStore, as Nomad's nomadFSM. Raft calls Apply and Restore from a single
// goroutine; Snapshot is called from that goroutine too, and the returned
// snapshot's Persist may run concurrently with later Apply calls.
type FSM struct {
	logger *slog.Logger
	state  *StateStore
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an FSM over an empty state. A nil logger discards logs.
func NewFSM(logger *slog.Logger) *FSM {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	st, err := newStateStore()
	if err != nil {
		// The schema is static; failing to build it is a programming error.
		panic(err)
	}
	return &FSM{logger: logger.With("component", "fsm"), state: st}
}

// State returns the FSM's state store. The pointer is stable for the life of
// the FSM: a Restore replaces the store's contents, not the store.
func (f *FSM) State() *StateStore {
	return f.state
}

// Apply applies one committed Raft log entry, as raft.FSM requires. Only
// raft.LogCommand entries are applied; other types yield nil. The result is:
//
//   - an error value (wrapping ErrMalformed, ErrUnknownMessageType,
//     ErrInvalidRequest, ErrClusterIDMismatch, ErrNodeNotFound,
//     ErrStaleIncarnation, ErrActorNotFound, ErrActorDead,
//     ErrActorNameTaken, ErrTokenExists, ErrTokenNotFound, ErrJobExists,
//     ErrJobNotFound, ErrJobFinal or ErrJobNotFinal) when the entry is rejected, in which
//     case the state is unchanged;
//   - *KVSetResult for a KVSet command;
//   - *ActorRegisterResult for an ActorRegister command;
//   - *PlacementGroupWriteResult for a PlacementGroupWrite command (its
//     ops fail one by one, with ErrPlacementGroupNotFound,
//     ErrPlacementGroupRemoved, ErrPlacementGroupNameTaken, ErrReservation
//     or ErrInvalidRequest, without failing the entry);
//   - nil for every other successful command.
//
// Apply never panics on bad input: an empty, truncated or unknown entry is
// logged and returned as an error value so that a malformed entry cannot
// crash a node.
func (f *FSM) Apply(l *raft.Log) (result any) {
	if l == nil || l.Type != raft.LogCommand {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("apply log %d: %w: %v", l.Index, errApplyPanic, r)
			f.logger.Error("apply panicked", "index", l.Index, "panic", r, "stack", string(debug.Stack()))
			result = err
		}
	}()
	t, req, err := decode(l.Data)
	if err != nil {
		err = fmt.Errorf("apply log %d: %w", l.Index, err)
		f.logger.Error("rejecting malformed log entry", "index", l.Index, "error", err)
		return err
	}
	res, err := f.apply(l.Index, t, req)
	if err != nil {
		f.logger.Warn("command rejected", "index", l.Index, "type", t.String(), "error", err)
		return err
	}
	return res
}

// apply dispatches a decoded request to the state store.
func (f *FSM) apply(index uint64, t MessageType, req any) (any, error) {
	switch r := req.(type) {
	case *ClusterInitRequest:
		if err := f.state.initCluster(index, r.Meta); err != nil {
			return nil, fmt.Errorf("apply cluster init for %s: %w", r.Meta.ID, err)
		}
	case *NodeRegisterRequest:
		if err := f.state.upsertNode(index, &r.Node); err != nil {
			return nil, fmt.Errorf("apply node register for %s: %w", r.Node.ID, err)
		}
	case *NodeStatusRequest:
		if err := f.state.updateNodeStatus(index, r.NodeID, r.Status, r.At); err != nil {
			return nil, fmt.Errorf("apply node status for %s: %w", r.NodeID, err)
		}
	case *NodeEligibilityRequest:
		if err := f.state.setNodeEligibility(index, r); err != nil {
			return nil, fmt.Errorf("apply node eligibility for %s: %w", r.NodeID, err)
		}
	case *NodeDeregisterRequest:
		if err := f.state.deleteNode(index, r.NodeID); err != nil {
			return nil, fmt.Errorf("apply node deregister for %s: %w", r.NodeID, err)
		}
	case *KVSetRequest:
		res, err := f.state.kvSet(index, r)
		if err != nil {
			return nil, fmt.Errorf("apply kv set for %q: %w", r.Key, err)
		}
		return res, nil
	case *KVDeleteRequest:
		if err := f.state.kvDelete(index, r.Key); err != nil {
			return nil, fmt.Errorf("apply kv delete for %q: %w", r.Key, err)
		}
	case *ActorRegisterRequest:
		res, err := f.state.registerActor(index, r)
		if err != nil {
			return nil, fmt.Errorf("apply actor register for %s: %w", r.Actor.ID, err)
		}
		return res, nil
	case *ActorUpdateRequest:
		if err := f.state.updateActor(index, r); err != nil {
			return nil, fmt.Errorf("apply actor update for %s: %w", r.Actor.ID, err)
		}
	case *PlacementGroupWriteRequest:
		res, err := f.state.writePlacementGroups(index, r)
		if err != nil {
			return nil, fmt.Errorf("apply placement group write of %d ops: %w", len(r.Ops), err)
		}
		return res, nil
	case *TokenCreateRequest:
		if err := f.state.createToken(index, &r.Token); err != nil {
			return nil, fmt.Errorf("apply token create for %s: %w", r.Token.ID, err)
		}
	case *TokenRevokeRequest:
		if err := f.state.revokeToken(index, r.ID); err != nil {
			return nil, fmt.Errorf("apply token revoke for %s: %w", r.ID, err)
		}
	case *JobWriteRequest:
		if err := f.state.writeJob(index, r); err != nil {
			return nil, fmt.Errorf("apply job write for %s: %w", r.Job.ID, err)
		}
	case *JobDeleteRequest:
		if err := f.state.deleteJob(index, r.ID); err != nil {
			return nil, fmt.Errorf("apply job delete for %s: %w", r.ID, err)
		}
	default:
		return nil, fmt.Errorf("apply %v: %w", t, ErrUnknownMessageType)
	}
	return nil, nil
}
