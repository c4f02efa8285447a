package sched

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// LabelOp is a label-selector operator, as in Ray's node label scheduling
// (NodeLabelSchedulingStrategy's In, NotIn, Exists, DoesNotExist) and
// Kubernetes node affinity.
type LabelOp string

// The label operators.
const (
	// OpIn matches nodes whose label has one of the values.
	OpIn LabelOp = "in"
	// OpNotIn matches nodes whose label is absent or has none of the values.
	OpNotIn LabelOp = "not_in"
	// OpExists matches nodes that have the label, with any value.
	OpExists LabelOp = "exists"
	// OpDoesNotExist matches nodes that do not have the label.
	OpDoesNotExist LabelOp = "does_not_exist"
)

// ErrInvalidLabelSelector is wrapped by LabelSelector.Validate errors.
var ErrInvalidLabelSelector = errors.New("invalid label selector")

// LabelMatch is one condition on one label's value; build it with In,
// NotIn, Exists or DoesNotExist.
type LabelMatch struct {
	// Op is the operator.
	Op LabelOp
	// Values are the values for OpIn and OpNotIn; ignored otherwise.
	Values []string
}

// In matches nodes whose label is one of values (Ray's In(...)).
func In(values ...string) LabelMatch { return LabelMatch{Op: OpIn, Values: values} }

// NotIn matches nodes whose label is absent or none of values (Ray's NotIn).
func NotIn(values ...string) LabelMatch { return LabelMatch{Op: OpNotIn, Values: values} }

// Exists matches nodes having the label with any value (Ray's Exists()).
func Exists() LabelMatch { return LabelMatch{Op: OpExists} }

// DoesNotExist matches nodes without the label (Ray's DoesNotExist()).
func DoesNotExist() LabelMatch { return LabelMatch{Op: OpDoesNotExist} }

// String renders the condition for messages: `in (rack1, rack2)`, `exists`.
func (m LabelMatch) String() string {
	switch m.Op {
	case OpIn, OpNotIn:
		return fmt.Sprintf("%s (%s)", m.Op, strings.Join(m.Values, ", "))
	}
	return string(m.Op)
}

// matches reports whether a node label (value, present) satisfies m.
func (m LabelMatch) matches(value string, present bool) bool {
	switch m.Op {
	case OpIn:
		return present && slices.Contains(m.Values, value)
	case OpNotIn:
		return !present || !slices.Contains(m.Values, value)
	case OpExists:
		return present
	case OpDoesNotExist:
		return !present
	}
	return false
}

// LabelSelector maps a label key to the condition its value must meet, e.g.
// LabelSelector{"zone": In("rack1", "rack2"), "spot": DoesNotExist()}. A
// node matches when every condition holds (AND, as Ray). An empty or nil
// selector matches every node.
type LabelSelector map[string]LabelMatch

// Validate checks every condition: a known operator, and at least one value
// for In and NotIn. Errors wrap ErrInvalidLabelSelector and name the key.
func (s LabelSelector) Validate() error {
	if len(s) == 0 {
		return nil // every lease request checks its selector; most have none
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		m := s[k]
		switch m.Op {
		case OpIn, OpNotIn:
			if len(m.Values) == 0 {
				return fmt.Errorf("%w: label %q: operator %s needs at least one value", ErrInvalidLabelSelector, k, m.Op)
			}
		case OpExists, OpDoesNotExist:
		default:
			return fmt.Errorf("%w: label %q: unknown operator %q; accepted are %s, %s, %s, %s",
				ErrInvalidLabelSelector, k, string(m.Op), OpIn, OpNotIn, OpExists, OpDoesNotExist)
		}
		if k == "" {
			return fmt.Errorf("%w: empty label key", ErrInvalidLabelSelector)
		}
	}
	return nil
}

// Matches reports whether labels satisfy every condition of s; when not, it
// also returns the first failing condition (by key order) in words, e.g.
// `label zone="rack3" is not in (rack1, rack2)`.
func (s LabelSelector) Matches(labels map[string]string) (bool, string) {
	// Lease requests ask this of every candidate node: decide without
	// sorting, and sort only to name the first failing condition.
	ok := true
	for k, m := range s {
		if v, present := labels[k]; !m.matches(v, present) {
			ok = false
			break
		}
	}
	if ok {
		return true, ""
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		m := s[k]
		v, ok := labels[k]
		if m.matches(v, ok) {
			continue
		}
		if !ok {
			return false, fmt.Sprintf("label %s is missing (wanted %s)", k, m)
		}
		return false, fmt.Sprintf("label %s=%q does not satisfy %s", k, v, m)
	}
	return true, ""
}

// String renders the selector in key order for messages and keys:
// `spot does_not_exist, zone in (rack1, rack2)`; "" when empty.
func (s LabelSelector) String() string {
	parts := make([]string, 0, len(s))
	for _, k := range slices.Sorted(maps.Keys(s)) {
		parts = append(parts, k+" "+s[k].String())
	}
	return strings.Join(parts, ", ")
}
