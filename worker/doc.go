// Package worker will hold the core worker: the library linked into drivers
// and workers (Init, remote functions, Get/Put/Wait, actors), the worker
// protocol and the worker pool (docs/architecture.md). The task and object
// issue fills it in.
package worker
