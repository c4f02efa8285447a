package sched

import (
	"errors"
	"strings"
	"testing"
)

func TestParseResourcesGood(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want ResourceSet
	}{
		{"", ResourceSet{}},
		{"   \n", ResourceSet{}},
		{"{}", ResourceSet{}},
		{" { } ", ResourceSet{}},
		{"TPU-v3=2,FPGA=4", ResourceSet{"TPU-v3": 20000, "FPGA": 40000}},
		{" TPU-v3 = 2 , FPGA=0.5 ", ResourceSet{"TPU-v3": 20000, "FPGA": 5000}},
		{"CPU=2, TPU-v3=2", ResourceSet{CPU: 20000, "TPU-v3": 20000}},
		{"node:abc=0.0001,accelerator_type:H100=1", ResourceSet{"node:abc": 1, "accelerator_type:H100": Unit}},
		{"memory=16000000000", ResourceSet{Memory: QuantityOf(16000000000)}},
		{"A=0", ResourceSet{"A": 0}},
		{`{"TPU-v3": 2, "FPGA": 0.5}`, ResourceSet{"TPU-v3": 20000, "FPGA": 5000}},
		{`  {"x": 0.1, "object_store_memory": 1073741824}  `, ResourceSet{"x": 1000, ObjectStoreMemory: QuantityOf(1 << 30)}},
		{`{"A": 0.10000}`, ResourceSet{"A": 1000}},
	} {
		got, err := ParseResources(tc.in)
		if err != nil || got == nil || !got.Equal(tc.want) || len(got) != len(tc.want) {
			t.Errorf("ParseResources(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseResourcesBad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		mention []string
		is      error
	}{
		{"TPU-v3=-1", []string{`resource "TPU-v3": invalid quantity "-1": must not be negative`}, ErrInvalidQuantity},
		{"A=1,A=2", []string{`resource "A" is given more than once`}, ErrInvalidResources},
		{"A=1, B=0.00001", []string{`resource "B"`, `"0.00001"`, "at most 4 decimal places"}, ErrInvalidQuantity},
		{"A=", []string{`resource "A": invalid quantity ""`}, ErrInvalidQuantity},
		{"A=1x", []string{`"1x"`}, ErrInvalidQuantity},
		{"A=1,5", []string{`item "5" has no '='`}, ErrInvalidResources},
		{"FPGA", []string{`item "FPGA" has no '='`}, ErrInvalidResources},
		{"A=1,,B=2", []string{"item 2 is empty"}, ErrInvalidResources},
		{"A=1,", []string{"item 2 is empty"}, ErrInvalidResources},
		{"=1", []string{`invalid resource name "": must not be empty`}, ErrInvalidResourceName},
		{"a b=1", []string{`invalid resource name "a b"`}, ErrInvalidResourceName},
		{"A=1=2", []string{`resource "A": invalid quantity "1=2"`}, ErrInvalidQuantity},
		{"A=NaN", []string{`"NaN"`, "finite"}, ErrInvalidQuantity},
		{`{"A":"x"}`, []string{`resource "A": value is string "x", not a number`}, ErrInvalidResources},
		{`{"A":true}`, []string{`resource "A": value is boolean true`}, ErrInvalidResources},
		{`{"A":null}`, []string{`resource "A": value is null`}, ErrInvalidResources},
		{`{"A":{"B":1}}`, []string{`resource "A": value is an object`}, ErrInvalidResources},
		{`{"A":[1]}`, []string{`resource "A": value is an array`}, ErrInvalidResources},
		{`[1]`, []string{"got an array", "JSON object"}, ErrInvalidResources},
		{`{"A":1,"A":2}`, []string{`resource "A" is given more than once`}, ErrInvalidResources},
		{`{"A":-1}`, []string{`resource "A": invalid quantity "-1": must not be negative`}, ErrInvalidQuantity},
		{`{"A":1e3}`, []string{`resource "A": invalid quantity "1e3": exponent`}, ErrInvalidQuantity},
		{`{"A":0.00001}`, []string{`"0.00001"`, "at most 4 decimal places"}, ErrInvalidQuantity},
		{`{"a b":1}`, []string{`invalid resource name "a b"`}, ErrInvalidResourceName},
		{`{"A":1`, []string{"unexpected end of input"}, ErrInvalidResources},
		{`{"A":`, []string{`resource "A": unexpected end of input`}, ErrInvalidResources},
		{`{"A" 1}`, []string{"invalid character"}, ErrInvalidResources},
		{`{1:2}`, []string{"invalid character"}, ErrInvalidResources},
		{`{"A":1}{}`, []string{"data after the object: an object"}, ErrInvalidResources},
		{`{"A":1} x`, []string{"after the object"}, ErrInvalidResources},
		{`{"A":NaN}`, []string{"invalid character"}, ErrInvalidResources},
	} {
		got, err := ParseResources(tc.in)
		if err == nil {
			t.Errorf("ParseResources(%q) = %v, want error", tc.in, got)
			continue
		}
		if got != nil {
			t.Errorf("ParseResources(%q) returned a set with an error", tc.in)
		}
		for _, m := range tc.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("ParseResources(%q) error %q: want it to mention %q", tc.in, err, m)
			}
		}
		if !errors.Is(err, tc.is) {
			t.Errorf("ParseResources(%q) error %q does not wrap %v", tc.in, err, tc.is)
		}
	}
}

func FuzzParseResources(f *testing.F) {
	for _, seed := range []string{
		"",
		"TPU-v3=2,FPGA=4",
		" CPU = 0.5 , node:abc=0.0001 ",
		"memory=922337203685477.5807",
		`{"TPU-v3": 2, "FPGA": 0.5}`,
		`{"A": 1, "A": 2}`,
		`{"A": "x"}`,
		`[1]`,
		"A=0.00001",
		"A=1,,B",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseResources(s)
		if err != nil {
			if r != nil {
				t.Fatalf("ParseResources(%q) returned a set and error %v", s, err)
			}
			return
		}
		if r == nil {
			t.Fatalf("ParseResources(%q) returned nil set and nil error", s)
		}
		text := r.String()
		back, err := ParseResources(text)
		if err != nil {
			t.Fatalf("ParseResources(%q) = %s, which does not re-parse: %v", s, text, err)
		}
		if !back.Equal(r) || len(back) != len(r) {
			t.Fatalf("ParseResources(%q) = %s, re-parsed as %s", s, text, back)
		}
	})
}
