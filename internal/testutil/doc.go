// Package testutil holds what nodeup's tests share across packages: the one
// polling helper (Until), the quiet test logger, and the process-level
// harness pieces (a free port, a locked output buffer, one build of the
// nodeup binary). It imports nothing of nodeup, so every package's tests,
// cluster's internal ones included, may use it; the in-process cluster
// harness is cluster/clustertest.
package testutil
