package store

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/internal/mpsafe"
	"github.com/nodeup/nodeup/sched"
)

// MessageType identifies the command carried by a Raft log entry; it is the
// first byte of the entry's data, as Nomad's structs.MessageType.
//
// The numbering is append-only: values are persisted in Raft logs and
// snapshots and must never change or be reused. Add new types at the end.
type MessageType uint8

const (
	// ClusterInitType carries a ClusterInitRequest.
	ClusterInitType MessageType = 0
	// NodeRegisterType carries a NodeRegisterRequest.
	NodeRegisterType MessageType = 1
	// NodeStatusType carries a NodeStatusRequest.
	NodeStatusType MessageType = 2
	// NodeDeregisterType carries a NodeDeregisterRequest.
	NodeDeregisterType MessageType = 3
	// KVSetType carries a KVSetRequest.
	KVSetType MessageType = 4
	// KVDeleteType carries a KVDeleteRequest.
	KVDeleteType MessageType = 5
	// ActorRegisterType carries an ActorRegisterRequest.
	ActorRegisterType MessageType = 6
	// ActorUpdateType carries an ActorUpdateRequest.
	ActorUpdateType MessageType = 7
	// PlacementGroupWriteType carries a PlacementGroupWriteRequest.
	PlacementGroupWriteType MessageType = 8
	// TokenCreateType carries a TokenCreateRequest.
	TokenCreateType MessageType = 9
	// TokenRevokeType carries a TokenRevokeRequest.
	TokenRevokeType MessageType = 10
	// JobWriteType carries a JobWriteRequest.
	JobWriteType MessageType = 11
	// JobDeleteType carries a JobDeleteRequest.
	JobDeleteType MessageType = 12
	// NodeEligibilityType carries a NodeEligibilityRequest.
	NodeEligibilityType MessageType = 13
)

// String returns the name of the message type, or "MessageType(n)" for an
// unknown value.
func (t MessageType) String() string {
	switch t {
	case ClusterInitType:
		return "ClusterInit"
	case NodeRegisterType:
		return "NodeRegister"
	case NodeStatusType:
		return "NodeStatus"
	case NodeDeregisterType:
		return "NodeDeregister"
	case KVSetType:
		return "KVSet"
	case KVDeleteType:
		return "KVDelete"
	case ActorRegisterType:
		return "ActorRegister"
	case ActorUpdateType:
		return "ActorUpdate"
	case PlacementGroupWriteType:
		return "PlacementGroupWrite"
	case TokenCreateType:
		return "TokenCreate"
	case TokenRevokeType:
		return "TokenRevoke"
	case JobWriteType:
		return "JobWrite"
	case JobDeleteType:
		return "JobDelete"
	case NodeEligibilityType:
		return "NodeEligibility"
	}
	return fmt.Sprintf("MessageType(%d)", uint8(t))
}

// Errors returned by Encode and (as Apply results) by FSM.Apply. Apply
// results wrap them with context; test with errors.Is.
var (
	// ErrUnknownMessageType means the entry's type byte is not a known MessageType.
	ErrUnknownMessageType = errors.New("unknown message type")
	// ErrMalformed means the entry is empty or its body is not a valid msgpack
	// encoding of the request struct (including trailing bytes).
	ErrMalformed = errors.New("malformed command")
	// ErrInvalidRequest means the request decoded but its fields are invalid
	// (empty ID or key, NUL byte in an ID or key, invalid status, ...).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrClusterIDMismatch means a ClusterInit carried a cluster ID different from
	// the one already recorded.
	ErrClusterIDMismatch = errors.New("cluster already initialised with a different ID")
	// ErrNodeNotFound means the command refers to a node that is not registered.
	ErrNodeNotFound = errors.New("node not found")
	// ErrStaleIncarnation means a NodeRegister carried an incarnation lower than
	// the recorded one (a delayed registration from a previous run).
	ErrStaleIncarnation = errors.New("stale node incarnation")
	// ErrActorNotFound means the command refers to an actor that is not registered.
	ErrActorNotFound = errors.New("actor not found")
	// ErrActorDead means the command would change an actor that is DEAD (final).
	ErrActorDead = errors.New("actor is dead")
	// ErrActorStaleIncarnation means the command would record an actor
	// incarnation older than the table's (a placement the leader abandoned,
	// or an old leader's late write): the newer placement stands.
	ErrActorStaleIncarnation = errors.New("stale actor incarnation")
	// ErrActorNameTaken means a live actor of the namespace already has the name.
	ErrActorNameTaken = errors.New("actor name taken")
	// ErrPlacementGroupNotFound means the op names a group that is not registered.
	ErrPlacementGroupNotFound = errors.New("placement group not found")
	// ErrPlacementGroupRemoved means the op would change a REMOVED group (final).
	ErrPlacementGroupRemoved = errors.New("placement group removed")
	// ErrPlacementGroupNameTaken means a group of the namespace that is not
	// removed already has the name.
	ErrPlacementGroupNameTaken = errors.New("placement group name taken")
	// ErrReservation means a placement would break a rule of committed
	// state: an unregistered or dead node, a node reserved over its total,
	// or a strategy's hard constraint (STRICT_PACK, STRICT_SPREAD). It is
	// sched.ErrReservation, which sched.CheckStrategy's errors wrap.
	ErrReservation = sched.ErrReservation
	// ErrTokenExists means a TokenCreate carried the ID of a token already
	// recorded (IDs are random; a retry of the same create is a no-op).
	ErrTokenExists = errors.New("token ID taken")
	// ErrTokenNotFound means a TokenRevoke named a token that is not recorded.
	ErrTokenNotFound = errors.New("token not found")
)

// ClusterInitRequest records the cluster identity. It applies only once: a
// later ClusterInit with the same Meta.ID is a no-op (nil result), one with a
// different ID yields an ErrClusterIDMismatch error result. Meta.CreateIndex
// is ignored and set by the FSM.
type ClusterInitRequest struct {
	// Meta is the cluster identity; Meta.ID must be non-empty.
	Meta ClusterMeta
}

// NodeRegisterRequest upserts a node. On re-registration the recorded
// CreateIndex is kept and every other field is replaced. An empty Status
// means NodeAlive. StatusChangedAt is taken from the request when non-zero,
// otherwise it becomes RegisteredAt when the status changes and is kept when
// it does not. Errors: ErrInvalidRequest (empty ID, NUL in ID, invalid
// status), ErrStaleIncarnation. Nil Resources/Labels maps are fine.
type NodeRegisterRequest struct {
	// Node is the node record; CreateIndex and ModifyIndex are ignored.
	Node Node
}

// NodeStatusRequest changes the status of a registered node. Setting the
// status the node already has is a no-op. Errors: ErrInvalidRequest (invalid
// status), ErrNodeNotFound.
type NodeStatusRequest struct {
	// NodeID is the ID of the node.
	NodeID string
	// Status is the new status.
	Status NodeStatus
	// At is the time of the change in unix nanoseconds, stamped by the
	// proposer; it becomes Node.StatusChangedAt.
	At int64
}

// NodeEligibilityRequest sets whether the scheduling policy may place new
// work on a registered node (issue 19, as Nomad's node eligibility and
// drain). Eligible clears Ineligible, Draining and DrainDeadline; otherwise
// the node becomes Ineligible and, with Drain, Draining until DrainDeadline
// (unix nanoseconds, 0 for none). Errors: ErrInvalidRequest (Eligible with
// Drain, a negative deadline), ErrNodeNotFound.
type NodeEligibilityRequest struct {
	NodeID        string
	Eligible      bool
	Drain         bool
	DrainDeadline int64
}

// NodeDeregisterRequest removes a node from the state. Removing an unknown
// node is a no-op, so that retries are idempotent.
type NodeDeregisterRequest struct {
	// NodeID is the ID of the node.
	NodeID string
}

// KVSetRequest writes a key. Without CAS the write always succeeds. With
// CAS it succeeds only if the key's current ModifyIndex equals Index, where
// Index 0 means the key must not exist. The Apply result is a *KVSetResult.
// Errors: ErrInvalidRequest (empty key or NUL in key).
type KVSetRequest struct {
	// Key is the key to write.
	Key string
	// Value is the value to store (nil and empty are both allowed).
	Value []byte
	// CAS makes the write a check-and-set on Index.
	CAS bool
	// Index is the expected current ModifyIndex for a CAS write (0: absent).
	Index uint64
}

// KVSetResult is the Apply result of a KVSet command.
type KVSetResult struct {
	// OK reports whether the value was written (always true without CAS).
	OK bool
	// Index is the key's ModifyIndex after the command: the log index of the
	// write when OK, otherwise the current ModifyIndex (0 if the key does
	// not exist), so that a failed CAS can be retried.
	Index uint64
}

// KVDeleteRequest removes a key. Removing a missing key is a no-op.
// Errors: ErrInvalidRequest (empty key).
type KVDeleteRequest struct {
	// Key is the key to remove.
	Key string
}

// Encode serialises a command as a Raft log payload: one byte t followed by
// the msgpack encoding of req. req must be the request struct matching t
// (value or pointer, e.g. NodeRegisterRequest or *NodeRegisterRequest for
// NodeRegisterType); otherwise Encode returns an error wrapping
// ErrUnknownMessageType or ErrInvalidRequest.
func Encode(t MessageType, req any) ([]byte, error) {
	if !requestMatches(t, req) {
		if newRequest(t) == nil {
			return nil, fmt.Errorf("encode %v: %w", t, ErrUnknownMessageType)
		}
		return nil, fmt.Errorf("encode %v: request of type %T: %w", t, req, ErrInvalidRequest)
	}
	var buf bytes.Buffer
	buf.WriteByte(byte(t))
	if err := msgpack.NewEncoder(&buf).Encode(req); err != nil {
		return nil, fmt.Errorf("encode %v: %w", t, err)
	}
	return buf.Bytes(), nil
}

// requestTypes maps each message type to its request struct.
var requestTypes = map[MessageType]reflect.Type{
	ClusterInitType:         reflect.TypeFor[ClusterInitRequest](),
	NodeRegisterType:        reflect.TypeFor[NodeRegisterRequest](),
	NodeStatusType:          reflect.TypeFor[NodeStatusRequest](),
	NodeDeregisterType:      reflect.TypeFor[NodeDeregisterRequest](),
	KVSetType:               reflect.TypeFor[KVSetRequest](),
	KVDeleteType:            reflect.TypeFor[KVDeleteRequest](),
	ActorRegisterType:       reflect.TypeFor[ActorRegisterRequest](),
	ActorUpdateType:         reflect.TypeFor[ActorUpdateRequest](),
	PlacementGroupWriteType: reflect.TypeFor[PlacementGroupWriteRequest](),
	TokenCreateType:         reflect.TypeFor[TokenCreateRequest](),
	TokenRevokeType:         reflect.TypeFor[TokenRevokeRequest](),
	JobWriteType:            reflect.TypeFor[JobWriteRequest](),
	JobDeleteType:           reflect.TypeFor[JobDeleteRequest](),
	NodeEligibilityType:     reflect.TypeFor[NodeEligibilityRequest](),
}

// requestMatches reports whether req is the request struct (or a non-nil
// pointer to it) for t.
func requestMatches(t MessageType, req any) bool {
	rt, ok := requestTypes[t]
	if !ok || req == nil {
		return false
	}
	switch v := reflect.ValueOf(req); v.Type() {
	case rt:
		return true
	case reflect.PointerTo(rt):
		return !v.IsNil()
	}
	return false
}

// newRequest returns a pointer to a zero request struct for t, or nil if t
// is unknown.
func newRequest(t MessageType) any {
	rt, ok := requestTypes[t]
	if !ok {
		return nil
	}
	return reflect.New(rt).Interface()
}

// decode parses a Raft log payload produced by Encode into its message type
// and a pointer to the request struct. It never panics on bad input; errors
// wrap ErrMalformed or ErrUnknownMessageType.
func decode(data []byte) (MessageType, any, error) {
	if len(data) == 0 {
		return 0, nil, fmt.Errorf("decode: empty entry: %w", ErrMalformed)
	}
	t := MessageType(data[0])
	req := newRequest(t)
	if req == nil {
		return t, nil, fmt.Errorf("decode: %w %d", ErrUnknownMessageType, data[0])
	}
	// Entries reach followers over the network: mpsafe rejects declared
	// lengths beyond the entry's bytes (and trailing bytes) before the
	// decoder allocates from them.
	if err := mpsafe.Unmarshal(data[1:], req); err != nil {
		return t, nil, fmt.Errorf("decode %v: %w: %v", t, ErrMalformed, err)
	}
	return t, req, nil
}
