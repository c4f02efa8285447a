// Package objstore will hold each node's object store: the mmap'd
// shared-memory arena in /dev/shm, allocation, pinning, spilling to the data
// dir and chunked transfer between nodes (docs/architecture.md). It is a leaf
// package; the task and object issue fills it in.
package objstore
