// Package archtest holds only tests: every package of the module imports
// no more of nodeup than its row of the package table in
// docs/architecture.md allows, so that table is the rule and cannot drift
// from the code; no daemon subsystem (a package under cluster/, but the
// harness cluster/clustertest) imports the root package cluster or
// another subsystem; and the data-plane subsystems (cluster/local,
// cluster/objects) link neither store, Raft nor memberlist, however
// indirectly (go list -deps).
package archtest
