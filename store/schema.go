package store

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"
)

// Table names of the go-memdb schema.
const (
	// tableNodes holds *Node, indexed by "id" (Node.ID, unique, prefix
	// lookups via "id_prefix") and "name" (Node.Name, non-unique).
	tableNodes = "nodes"
	// tableKV holds *KVEntry, indexed by "id" (KVEntry.Key, unique, prefix
	// lookups via "id_prefix").
	tableKV = "kv"
	// tableMeta holds the single *ClusterMeta, indexed by "id" (a constant
	// true: the table is a singleton).
	tableMeta = "meta"
	// tableIndex holds *indexEntry rows, indexed by "id" (indexEntry.Key); the
	// row with key indexLatest is the Raft index of the last state change, as
	// Nomad's "index" table.
	tableIndex = "index"
	// tableActors holds *Actor, indexed by "id" (Actor.ID, unique) and
	// "name" (Actor.NameKey, unique among live named actors).
	tableActors = "actors"
	// tablePGs holds *PlacementGroup, indexed by "id" (unique), "name"
	// (PlacementGroup.NameKey, unique among named groups not removed),
	// "live" (groups not REMOVED) and "removed" (PlacementGroup.RemovedKey:
	// removed groups, oldest first).
	tablePGs = "placement_groups"
	// tablePGReserved holds *placementReserved, indexed by "id" (NodeID):
	// what placement groups hold per node, derived from tablePGs.
	tablePGReserved = "placement_reserved"
	// tableTokens holds *TokenRecord, indexed by "id" (TokenRecord.ID).
	tableTokens = "tokens"
	// tableJobs holds *JobRecord (submitted jobs), indexed by "id".
	tableJobs = "jobs"
)

// indexLatest is the tableIndex key of the latest-change index.
const indexLatest = "latest"

// indexPGRemoved is the tableIndex key counting REMOVED placement groups.
const indexPGRemoved = "pg_removed"

// indexActorsDead is the tableIndex key counting DEAD actors.
const indexActorsDead = "actors_dead"

// indexEntry is one row of tableIndex.
type indexEntry struct {
	Key   string
	Value uint64
}

// stringIndex is an index on a string field of a table's records; records
// whose field is empty are left out of a non-"id" index (AllowMissing).
func stringIndex(name, field string, unique bool) *memdb.IndexSchema {
	return &memdb.IndexSchema{Name: name, Unique: unique, AllowMissing: name != "id",
		Indexer: &memdb.StringFieldIndex{Field: field}}
}

// table builds a table schema from its indexes (the first is "id").
func table(name string, indexes ...*memdb.IndexSchema) *memdb.TableSchema {
	t := &memdb.TableSchema{Name: name, Indexes: map[string]*memdb.IndexSchema{}}
	for _, ix := range indexes {
		t.Indexes[ix.Name] = ix
	}
	return t
}

// stateSchema returns the go-memdb schema of the state store.
func stateSchema() *memdb.DBSchema {
	// The meta table holds one record: its "id" index matches everything.
	meta := &memdb.IndexSchema{Name: "id", Unique: true,
		Indexer: &memdb.ConditionalIndex{Conditional: func(any) (bool, error) { return true, nil }}}
	// Live (not DEAD) actors, so the leader's scans skip the dead, which
	// accumulate.
	liveActors := &memdb.IndexSchema{Name: "live", Indexer: &memdb.ConditionalIndex{
		Conditional: func(obj any) (bool, error) { return obj.(*Actor).State != ActorDead, nil }}}
	// Actors waiting for a node (PENDING or RESTARTING), so the leader's
	// retry pass skips the live ones that run.
	waitingActors := &memdb.IndexSchema{Name: "waiting", Indexer: &memdb.ConditionalIndex{
		Conditional: func(obj any) (bool, error) { return obj.(*Actor).Waiting(), nil }}}
	// Groups not REMOVED, so the leader's scans skip the up to
	// MaxRemovedPlacementGroups removed ones kept for listings.
	livePGs := &memdb.IndexSchema{Name: "live", Indexer: &memdb.ConditionalIndex{
		Conditional: func(obj any) (bool, error) { return obj.(*PlacementGroup).Live(), nil }}}
	tables := []*memdb.TableSchema{
		table(tableNodes, stringIndex("id", "ID", true), stringIndex("name", "Name", false)),
		table(tableKV, stringIndex("id", "Key", true)),
		table(tableMeta, meta),
		table(tableActors, stringIndex("id", "ID", true), stringIndex("name", "NameKey", true), liveActors, waitingActors,
			stringIndex("dead", "DeadKey", false)),
		table(tablePGs, stringIndex("id", "ID", true), stringIndex("name", "NameKey", true), livePGs,
			stringIndex("removed", "RemovedKey", false)),
		table(tablePGReserved, stringIndex("id", "NodeID", true)),
		table(tableIndex, stringIndex("id", "Key", true)),
		table(tableTokens, stringIndex("id", "ID", true)),
		table(tableJobs, stringIndex("id", "ID", true)),
	}
	db := &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{}}
	for _, t := range tables {
		db.Tables[t.Name] = t
	}
	return db
}

// newMemDB returns an empty database with the state schema.
func newMemDB() (*memdb.MemDB, error) {
	db, err := memdb.NewMemDB(stateSchema())
	if err != nil {
		return nil, fmt.Errorf("create state database: %w", err)
	}
	return db, nil
}
