package cluster

import (
	"container/list"
	"sync"

	"github.com/nodeup/nodeup/wire"
)

// taskRingSize is how many tasks a node's task record keeps (Ray's
// RAY_task_events_max_num_task_in_gcs is 100,000 too).
const taskRingSize = 100_000

// taskRing is a node's record of tasks: the latest state of each, merged
// from the events its processes report, at most max tasks. When full, a
// new task evicts the task that finished (or failed) longest ago, else,
// with none finished, the oldest unfinished one; evicted counts them.
// Safe for concurrent use.
type taskRing struct {
	mu   sync.Mutex
	max  int
	byID map[string]*list.Element // of *wire.TaskEvent, in live or done
	// live holds unfinished tasks in order of arrival, done finished ones
	// in the order they finished (front: oldest).
	live, done *list.List
	evicted    int64 // tasks dropped to stay within max
	dropped    int64 // events reporters said they dropped
}

func newTaskRing(max int) *taskRing {
	return &taskRing{max: max, byID: map[string]*list.Element{}, live: list.New(), done: list.New()}
}

// add merges ev into the record (see wire.MergeTaskEvent).
func (r *taskRing) add(ev *wire.TaskEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.byID[ev.TaskID]; ok {
		cur := el.Value.(*wire.TaskEvent)
		wasDone := wire.TaskStateTerminal(cur.State)
		wire.MergeTaskEvent(cur, ev)
		switch isDone := wire.TaskStateTerminal(cur.State); {
		case isDone && !wasDone:
			r.live.Remove(el)
			r.byID[ev.TaskID] = r.done.PushBack(cur)
		case !isDone && wasDone: // retried after a reported failure
			r.done.Remove(el)
			r.byID[ev.TaskID] = r.live.PushBack(cur)
		}
		return
	}
	for len(r.byID) >= r.max && len(r.byID) > 0 {
		l := r.done
		if l.Len() == 0 {
			l = r.live
		}
		old := l.Remove(l.Front()).(*wire.TaskEvent)
		delete(r.byID, old.TaskID)
		r.evicted++
	}
	cp := *ev
	l := r.live
	if wire.TaskStateTerminal(cp.State) {
		l = r.done
	}
	r.byID[cp.TaskID] = l.PushBack(&cp)
}

// noteDropped counts events a reporter dropped.
func (r *taskRing) noteDropped(n int64) {
	r.mu.Lock()
	r.dropped += n
	r.mu.Unlock()
}

// list returns copies of the tasks that keep returns true, at most limit
// (the rest only counted in total), and the record's evicted plus dropped
// count.
func (r *taskRing) list(keep func(*wire.TaskEvent) bool, limit int) (out []wire.TaskEvent, total int, lost int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range []*list.List{r.done, r.live} {
		for el := l.Front(); el != nil; el = el.Next() {
			ev := el.Value.(*wire.TaskEvent)
			if !keep(ev) {
				continue
			}
			total++
			if len(out) < limit {
				out = append(out, *ev)
			}
		}
	}
	return out, total, r.evicted + r.dropped
}

// len is how many tasks the record holds.
func (r *taskRing) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}
