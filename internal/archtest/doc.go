// Package archtest holds only a test: every package of the module imports
// no more of nodeup than its row of the package table in
// docs/architecture.md allows, so that table is the rule and cannot drift
// from the code.
package archtest
