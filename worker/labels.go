package worker

import (
	"fmt"

	"github.com/nodeup/nodeup/sched"
)

// LabelSelector maps a node label key to the condition its value must meet,
// e.g. LabelSelector{"zone": In("rack1", "rack2"), "spot": DoesNotExist()}:
// every condition must hold (AND), as Ray's label_selector. An empty
// selector matches every node.
type LabelSelector map[string]LabelMatch

// LabelMatch is one condition on a node label's value; build it with In,
// NotIn, Exists or DoesNotExist (the zero LabelMatch is refused).
type LabelMatch struct{ m sched.LabelMatch }

// String renders the condition: `in (rack1, rack2)`, `exists`.
func (m LabelMatch) String() string { return m.m.String() }

// In matches nodes whose label is one of values (Ray's In).
func In(values ...string) LabelMatch { return LabelMatch{sched.In(values...)} }

// NotIn matches nodes whose label is absent or none of values (Ray's NotIn).
func NotIn(values ...string) LabelMatch { return LabelMatch{sched.NotIn(values...)} }

// Exists matches nodes that have the label, with any value (Ray's Exists).
func Exists() LabelMatch { return LabelMatch{sched.Exists()} }

// DoesNotExist matches nodes without the label (Ray's DoesNotExist).
func DoesNotExist() LabelMatch { return LabelMatch{sched.DoesNotExist()} }

// sched converts sel for the scheduler (nil for an empty selector).
func (sel LabelSelector) sched() sched.LabelSelector {
	if len(sel) == 0 {
		return nil
	}
	out := make(sched.LabelSelector, len(sel))
	for k, m := range sel {
		out[k] = m.m
	}
	return out
}

// NodeLabels restricts a task or actor to nodes whose labels (set with
// `nodeup start --labels zone=rack1`) satisfy sel, e.g.
// NodeLabels(LabelSelector{"zone": In("rack1", "rack2")}); it combines with
// any strategy (Spread, NodeAffinity, the default), as Ray's
// label_selector. When no alive node matches, the work is infeasible and
// the reason names the first failing label. Errors: In or NotIn without
// values, a zero LabelMatch, an empty key; each names the key.
func NodeLabels(sel LabelSelector) Option {
	return func(o *taskOptions) error {
		s := sel.sched()
		if err := s.Validate(); err != nil {
			return fmt.Errorf("option NodeLabels: %w", err)
		}
		o.strategy.Labels = s
		return nil
	}
}
