// Package store is nodeup's replicated state machine: the records the
// control-plane Raft group agrees on (cluster identity, node membership,
// a small key/value space), the commands that change them, and the
// raft.FSM that applies those commands to an in-memory go-memdb database.
//
// The layout follows Nomad's nomad/fsm.go and nomad/state/ package:
//
//   - types.go: the records (Node, ClusterMeta, KVEntry);
//   - commands.go: the MessageType enumeration, request structs and Encode;
//   - schema.go: the go-memdb schema;
//   - state.go: StateStore, the read API and the unexported write methods;
//   - fsm.go: FSM, the raft.FSM implementation;
//   - snapshot.go: snapshot persistence and restore.
//
// State changes only through FSM.Apply and FSM.Restore; everything else in
// the process reads through the StateStore returned by FSM.State. Records
// handed out by the StateStore are deep copies the caller may mutate.
package store
