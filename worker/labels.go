package worker

import (
	"fmt"

	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/wire"
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

// NodeLabelStrategy is Ray's NodeLabelSchedulingStrategy(hard, soft): the
// task or actor runs only on nodes whose labels satisfy hard (as
// NodeLabels), and among those prefers nodes satisfying soft: a soft match
// with the demand free, else any node with it free, else it waits on a
// soft match, else on any hard match. Either selector may be empty. It
// replaces the strategy (Spread or NodeAffinity before it is dropped), as
// Ray's scheduling_strategy takes one strategy. Errors: a malformed
// selector (In or NotIn without values, a zero LabelMatch, an empty key),
// naming the key and whether it is hard or soft.
func NodeLabelStrategy(hard, soft LabelSelector) Option {
	return func(o *taskOptions) error {
		h, s := hard.sched(), soft.sched()
		if err := h.Validate(); err != nil {
			return fmt.Errorf("option NodeLabelStrategy: hard: %w", err)
		}
		if err := s.Validate(); err != nil {
			return fmt.Errorf("option NodeLabelStrategy: soft: %w", err)
		}
		o.strategy = wire.Strategy{Labels: h, SoftLabels: s}
		return nil
	}
}
