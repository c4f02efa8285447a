package sched

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestValidateResourceName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		CPU, GPU, Memory, ObjectStoreMemory,
		"TPU-v3", "node:abc", "accelerator_type:H100", "a/b.c", "x",
		NodeResource("10.0.0.1"), AcceleratorTypeResource("A100-80GB"),
		strings.Repeat("n", MaxResourceNameLen),
	} {
		if err := ValidateResourceName(name); err != nil {
			t.Errorf("ValidateResourceName(%q) = %v, want nil", name, err)
		}
	}
	for _, tc := range []struct{ name, reason string }{
		{"", "must not be empty"},
		{"a b", `character ' ' at offset 1`},
		{"a=b", `character '='`},
		{"a,b", `character ','`},
		{"{a}", `character '{'`},
		{"a\x00", `character '\x00'`},
		{"Ü", "non-ASCII byte 0xc3 at offset 0"},
		{strings.Repeat("n", MaxResourceNameLen+1), "129 bytes long, at most 128"},
	} {
		err := ValidateResourceName(tc.name)
		if err == nil {
			t.Errorf("ValidateResourceName(%q) = nil, want error", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(tc.name)) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("ValidateResourceName(%q) = %q, want it to quote the name and mention %q", tc.name, err, tc.reason)
		}
		if !errors.Is(err, ErrInvalidResourceName) {
			t.Errorf("ValidateResourceName(%q) error does not wrap ErrInvalidResourceName", tc.name)
		}
	}
}

func TestNameHelpers(t *testing.T) {
	t.Parallel()
	if got := NodeResource("abc"); got != "node:abc" {
		t.Errorf("NodeResource = %q", got)
	}
	if got := AcceleratorTypeResource("H100"); got != "accelerator_type:H100" {
		t.Errorf("AcceleratorTypeResource = %q", got)
	}
}
