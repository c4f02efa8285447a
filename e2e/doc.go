// Package e2e holds process-level tests: they build bin/nodeup, start real
// node processes on 127.0.0.1 and drive them through the command line, as a
// user would. It has no non-test code.
package e2e
