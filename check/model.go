package check

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// never is the end time of something that had not ended when the history
// did.
const never = math.MaxInt64

// eps absorbs float rounding in resource sums (nodeup's amounts have at
// most 4 decimals).
const eps = 1e-6

// span is a closed-open interval of Unix nanoseconds.
type span struct{ from, to int64 }

// How a holder's interval ended.
const (
	endedNormally = "end"
	endedByCrash  = "crash"
	endedByKill   = "kill"
	endedOpen     = "open" // never ended in the history
)

// holder is one run of a task attempt or one actor incarnation: what it
// held, where, and when.
type holder struct {
	task     string
	attempt  int
	actor    bool
	node     string
	pid      int
	from, to int64
	ended    string // endedNormally, endedByCrash, endedByKill or endedOpen
	demand   map[string]float64
	strategy string
	group    string // placement group ("" outside any)
	bundle   int    // bundle index in group, -1 = any
	gpus     []int
	blocks   []span
	depth    int // open Block events (nested waits)
}

// name is "task#attempt" (or the actor's ID) for violation reports.
func (h *holder) name() string {
	if h.actor {
		return "actor " + h.task
	}
	return h.task + "#" + strconv.Itoa(h.attempt)
}

// active reports whether h holds its resources at t.
func (h *holder) active(t int64) bool { return h.from <= t && t < h.to }

// blockedWithin reports whether h was blocked in Get/Wait at any instant
// of [from, to].
func (h *holder) blockedWithin(from, to int64) bool {
	for _, b := range h.blocks {
		if b.from <= to && from < b.to {
			return true
		}
	}
	return false
}

// taskInfo is what the driver recorded about one task or actor.
type taskInfo struct {
	id       string
	submit   Event
	result   *Event
	attempts []*holder // in start order
	killed   int64     // actor: when Kill returned (0: never)
}

// group is one placement group and where its bundles went.
type group struct {
	id        string
	strategy  string
	created   int64 // CreatePlacementGroup called
	ready     int64 // Ready returned (0: never)
	removing  int64 // Remove called (never: not removed)
	removed   int64 // Remove returned (never: not removed)
	bundles   []Bundle
	nodeCount map[string]int
	idle      bool // created alone onto idle nodes (Event.PGIdle)
}

// crashEvent is a process that died on purpose (a task's os.Exit).
type crashEvent struct {
	at   int64
	pid  int
	node string
	task string
}

// model is the history digested: tasks, holders, groups, crashes.
type model struct {
	start, end int64 // first and last event
	tasks      map[string]*taskInfo
	order      []string // task IDs in submit (or first seen) order
	holders    []*holder
	groups     map[string]*group
	crashes    []crashEvent
	leaks      []Event
	phases     []Event
	nodes      []Node // from the Cluster event
}

// build digests a history (sorted by time).
func build(h History) *model {
	m := &model{tasks: map[string]*taskInfo{}, groups: map[string]*group{}}
	if len(h) > 0 {
		m.start, m.end = h[0].Time, h[len(h)-1].Time
	}
	byAttempt := map[string]*holder{}
	for _, e := range h {
		m.apply(e, byAttempt)
	}
	for _, hd := range m.holders {
		if hd.to == never {
			hd.to, hd.ended = m.end, endedOpen
		}
		for i := range hd.blocks {
			if hd.blocks[i].to == never {
				hd.blocks[i].to = hd.to
			}
		}
	}
	return m
}

func attemptKey(task string, attempt int) string { return task + "#" + strconv.Itoa(attempt) }

func (m *model) task(id string) *taskInfo {
	t := m.tasks[id]
	if t == nil {
		t = &taskInfo{id: id}
		m.tasks[id] = t
		m.order = append(m.order, id)
	}
	return t
}

func (m *model) group(id string) *group {
	g := m.groups[id]
	if g == nil {
		g = &group{id: id, removing: never, removed: never}
		m.groups[id] = g
	}
	return g
}

// apply folds one event into the model.
func (m *model) apply(e Event, byAttempt map[string]*holder) {
	switch e.Kind {
	case Submit:
		m.task(e.Task).submit = e
	case Start:
		m.startHolder(e, byAttempt)
	case End:
		if hd := byAttempt[attemptKey(e.Task, e.Attempt)]; hd != nil && hd.to == never {
			hd.to, hd.ended = e.Time, endedNormally
		}
	case Block:
		if hd := byAttempt[attemptKey(e.Task, e.Attempt)]; hd != nil {
			if hd.depth++; hd.depth == 1 {
				hd.blocks = append(hd.blocks, span{e.Time, never})
			}
		}
	case Unblock:
		if hd := byAttempt[attemptKey(e.Task, e.Attempt)]; hd != nil && hd.depth > 0 {
			if hd.depth--; hd.depth == 0 {
				hd.blocks[len(hd.blocks)-1].to = e.Time
			}
		}
	case Crash:
		m.crash(e)
	case Result:
		ev := e
		m.task(e.Task).result = &ev
	case Kill:
		m.kill(e)
	case Killed:
		m.task(e.Task).killed = e.Time
	default:
		m.applyDriver(e)
	}
}

// applyDriver folds placement-group, phase and leak events.
func (m *model) applyDriver(e Event) {
	switch e.Kind {
	case PGCreate:
		g := m.group(e.Group)
		g.created, g.strategy, g.bundles, g.idle = e.Time, e.PGStrategy, e.Bundles, e.PGIdle
	case PGReady:
		g := m.group(e.Group)
		g.ready = e.Time
		if len(e.Bundles) > 0 {
			g.bundles = e.Bundles
		}
		g.nodeCount = map[string]int{}
		for _, b := range g.bundles {
			g.nodeCount[b.Node]++
		}
	case PGRemove:
		m.group(e.Group).removing = e.Time
	case PGRemoved:
		m.group(e.Group).removed = e.Time
	case Phase:
		m.phases = append(m.phases, e)
	case Leak:
		m.leaks = append(m.leaks, e)
	case Cluster:
		m.nodes = e.Nodes
	}
}

func (m *model) startHolder(e Event, byAttempt map[string]*holder) {
	t := m.task(e.Task)
	demand, strategy := e.Demand, e.Strategy
	if demand == nil {
		demand = t.submit.Demand
	}
	if strategy == "" {
		strategy = t.submit.Strategy
	}
	hd := &holder{task: e.Task, attempt: e.Attempt, actor: e.Actor, node: e.Node, pid: e.PID, from: e.Time, to: never,
		demand: demand, strategy: strategy, gpus: e.GPUIDs, bundle: -1}
	hd.group, hd.bundle = parsePG(strategy)
	// An actor restarted after a kill is a new incarnation: the old one
	// ended at the latest here.
	if prev := byAttempt[attemptKey(e.Task, e.Attempt)]; prev != nil && prev.to == never {
		prev.to, prev.ended = e.Time, endedByKill
	}
	byAttempt[attemptKey(e.Task, e.Attempt)] = hd
	t.attempts = append(t.attempts, hd)
	m.holders = append(m.holders, hd)
}

// crash ends every open holder of the dying process.
func (m *model) crash(e Event) {
	m.crashes = append(m.crashes, crashEvent{at: e.Time, pid: e.PID, node: e.Node, task: e.Task})
	for _, hd := range m.holders {
		if hd.pid == e.PID && hd.node == e.Node && hd.to == never {
			hd.to, hd.ended = e.Time, endedByCrash
		}
	}
}

// kill ends the actor's open incarnation when the driver asks to kill it.
func (m *model) kill(e Event) {
	for _, hd := range m.task(e.Task).attempts {
		if hd.to == never {
			hd.to, hd.ended = e.Time, endedByKill
		}
	}
}

// parsePG reads "pg:<group>:<index>"; "" and -1 for other strategies.
func parsePG(strategy string) (string, int) {
	rest, ok := strings.CutPrefix(strategy, "pg:")
	if !ok {
		return "", -1
	}
	g, idx, ok := strings.Cut(rest, ":")
	if !ok {
		return g, -1
	}
	i, err := strconv.Atoi(idx)
	if err != nil {
		return g, -1
	}
	return g, i
}

// firstStart returns the task's first attempt, or nil.
func (t *taskInfo) firstStart() *holder {
	if len(t.attempts) == 0 {
		return nil
	}
	return t.attempts[0]
}

// doneAt returns when the task's last attempt ended normally (0: never).
func (t *taskInfo) doneAt() int64 {
	for i := len(t.attempts) - 1; i >= 0; i-- {
		if t.attempts[i].ended == endedNormally {
			return t.attempts[i].to
		}
	}
	return 0
}

// sortedNames returns the keys of a resource map in order.
func sortedNames(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
