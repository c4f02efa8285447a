package store

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"
)

// firstWatch is first, also adding to ws a channel that fires when the
// looked-up index entry changes (the record is inserted, updated or
// deleted, or leaves a conditional index) and one that fires when a
// restore replaces the state: a long poll on one record then sleeps
// through writes to other records and tables (as Nomad's blocking queries
// use go-memdb watch sets). Wake-ups may be spurious: memdb may watch a
// wider key range than the one entry. A nil ws watches nothing.
func firstWatch[T copier[T]](s *StateStore, ws memdb.WatchSet, what, table, index string, args ...any) (T, error) {
	var zero T
	s.mu.RLock()
	db, restored := s.db, s.restored
	s.mu.RUnlock()
	ch, raw, err := db.Txn(false).FirstWatch(table, index, args...)
	if err != nil {
		return zero, fmt.Errorf("get %s: %w", what, err)
	}
	if ws != nil {
		ws.Add(restored)
		ws.Add(ch)
	}
	if raw == nil {
		return zero, nil
	}
	return raw.(T).Copy(), nil
}

// ActorByIDWatch is ActorByID, adding to ws what fires when that actor's
// record changes (see firstWatch).
func (s *StateStore) ActorByIDWatch(ws memdb.WatchSet, id string) (*Actor, error) {
	return firstWatch[*Actor](s, ws, "actor "+id, tableActors, "id", id)
}

// ActorByNameWatch is ActorByName, adding to ws what fires when the live
// actor of that name changes, appears or goes.
func (s *StateStore) ActorByNameWatch(ws memdb.WatchSet, namespace, name string) (*Actor, error) {
	return firstWatch[*Actor](s, ws, "actor "+namespace+"/"+name, tableActors, "name", namespace+"/"+name)
}

// TokenByIDWatch is TokenByID, adding to ws what fires when that token's
// record changes (see firstWatch).
func (s *StateStore) TokenByIDWatch(ws memdb.WatchSet, id string) (*TokenRecord, error) {
	return firstWatch[*TokenRecord](s, ws, "token "+id, tableTokens, "id", id)
}

// PlacementGroupByIDWatch is PlacementGroupByID, adding to ws what fires
// when that group's record changes.
func (s *StateStore) PlacementGroupByIDWatch(ws memdb.WatchSet, id string) (*PlacementGroup, error) {
	return firstWatch[*PlacementGroup](s, ws, "placement group "+id, tablePGs, "id", id)
}

// PlacementGroupByNameWatch is PlacementGroupByName, adding to ws what
// fires when the group of that name that is not removed changes, appears
// or goes.
func (s *StateStore) PlacementGroupByNameWatch(ws memdb.WatchSet, namespace, name string) (*PlacementGroup, error) {
	return firstWatch[*PlacementGroup](s, ws, "placement group "+namespace+"/"+name, tablePGs, "name", namespace+"/"+name)
}
