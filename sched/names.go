package sched

import (
	"errors"
	"fmt"
)

// Predefined resource names, spelled as in Ray so that resource requests and
// node reports written for Ray mean the same here.
const (
	// CPU is logical CPUs, in fixed-point units (10000 = one CPU).
	CPU = "CPU"
	// GPU is logical GPUs, in fixed-point units (5000 = half a GPU).
	GPU = "GPU"
	// Memory is heap memory for tasks and actors, counted in bytes
	// (QuantityOf(1<<30) is 1 GiB).
	Memory = "memory"
	// ObjectStoreMemory is object store capacity, counted in bytes.
	ObjectStoreMemory = "object_store_memory"
)

// Prefixes of Ray's implicit per-node and per-accelerator resources.
const (
	// NodeResourcePrefix starts the resource every node offers exactly one
	// unit of, so a demand of 0.001 of it pins work to that node.
	NodeResourcePrefix = "node:"
	// AcceleratorTypePrefix starts the resource a node offers one unit of
	// per accelerator model it has, for accelerator_type= constraints.
	AcceleratorTypePrefix = "accelerator_type:"
)

// MaxResourceNameLen is the longest accepted resource name, in bytes.
const MaxResourceNameLen = 128

// ErrInvalidResourceName is wrapped by every error from ValidateResourceName.
var ErrInvalidResourceName = errors.New("invalid resource name")

// NodeResource returns Ray's per-node resource name "node:<nodeID>".
func NodeResource(nodeID string) string { return NodeResourcePrefix + nodeID }

// AcceleratorTypeResource returns Ray's accelerator resource name
// "accelerator_type:<model>", e.g. "accelerator_type:H100".
func AcceleratorTypeResource(model string) string { return AcceleratorTypePrefix + model }

// ValidateResourceName reports whether name can be used as a resource name:
// 1 to 128 bytes of ASCII letters, digits and _ - . : / only. The set is
// narrower than Ray's so that names survive the "name=qty,..." text form,
// shell quoting, URLs and metric labels unchanged. The error wraps
// ErrInvalidResourceName and quotes name.
func ValidateResourceName(name string) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidResourceName, name, fmt.Sprintf(format, a...))
	}
	if name == "" {
		return fail("must not be empty")
	}
	if len(name) > MaxResourceNameLen {
		return fail("%d bytes long, at most %d are accepted", len(name), MaxResourceNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !nameByte(c) {
			what := fmt.Sprintf("character %q", rune(c))
			if c >= 0x80 {
				what = fmt.Sprintf("non-ASCII byte 0x%02x", c)
			}
			return fail("%s at offset %d is not accepted; use ASCII letters, digits and _ - . : / only", what, i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '_', '-', '.', ':', '/':
		return true
	}
	return false
}
