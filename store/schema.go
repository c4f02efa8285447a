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
	// (PlacementGroup.NameKey, unique among named groups not removed) and
	// "removed" (PlacementGroup.RemovedKey: removed groups, oldest first).
	tablePGs = "placement_groups"
	// tablePGReserved holds *placementReserved, indexed by "id" (NodeID):
	// what placement groups hold per node, derived from tablePGs.
	tablePGReserved = "placement_reserved"
)

// indexLatest is the tableIndex key of the latest-change index.
const indexLatest = "latest"

// indexPGRemoved is the tableIndex key counting REMOVED placement groups.
const indexPGRemoved = "pg_removed"

// indexEntry is one row of tableIndex.
type indexEntry struct {
	Key   string
	Value uint64
}

// stateSchema returns the go-memdb schema of the state store.
func stateSchema() *memdb.DBSchema {
	return &memdb.DBSchema{
		Tables: map[string]*memdb.TableSchema{
			tableNodes: {
				Name: tableNodes,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {
						Name:    "id",
						Unique:  true,
						Indexer: &memdb.StringFieldIndex{Field: "ID"},
					},
					"name": {
						Name:         "name",
						AllowMissing: true,
						Indexer:      &memdb.StringFieldIndex{Field: "Name"},
					},
				},
			},
			tableKV: {
				Name: tableKV,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {
						Name:    "id",
						Unique:  true,
						Indexer: &memdb.StringFieldIndex{Field: "Key"},
					},
				},
			},
			tableMeta: {
				Name: tableMeta,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {
						Name:   "id",
						Unique: true,
						Indexer: &memdb.ConditionalIndex{
							Conditional: func(any) (bool, error) { return true, nil },
						},
					},
				},
			},
			tableActors: {
				Name: tableActors,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {
						Name:    "id",
						Unique:  true,
						Indexer: &memdb.StringFieldIndex{Field: "ID"},
					},
					"name": {
						Name:         "name",
						Unique:       true,
						AllowMissing: true,
						Indexer:      &memdb.StringFieldIndex{Field: "NameKey"},
					},
				},
			},
			tablePGs: {
				Name: tablePGs,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {
						Name:    "id",
						Unique:  true,
						Indexer: &memdb.StringFieldIndex{Field: "ID"},
					},
					"name": {
						Name:         "name",
						Unique:       true,
						AllowMissing: true,
						Indexer:      &memdb.StringFieldIndex{Field: "NameKey"},
					},
					"removed": {
						Name:         "removed",
						AllowMissing: true,
						Indexer:      &memdb.StringFieldIndex{Field: "RemovedKey"},
					},
				},
			},
			tablePGReserved: {
				Name: tablePGReserved,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {
						Name:    "id",
						Unique:  true,
						Indexer: &memdb.StringFieldIndex{Field: "NodeID"},
					},
				},
			},
			tableIndex: {
				Name: tableIndex,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {
						Name:    "id",
						Unique:  true,
						Indexer: &memdb.StringFieldIndex{Field: "Key"},
					},
				},
			},
		},
	}
}

// newMemDB returns an empty database with the state schema.
func newMemDB() (*memdb.MemDB, error) {
	db, err := memdb.NewMemDB(stateSchema())
	if err != nil {
		return nil, fmt.Errorf("create state database: %w", err)
	}
	return db, nil
}
