package observe

import (
	"container/list"
	"sync"

	"github.com/nodeup/nodeup/wire"
)

// taskRingSize is how many tasks a node's task record keeps (Ray's
// RAY_task_events_max_num_task_in_gcs is 100,000 too), and taskRingBytes
// about how many bytes their records may take: events with every string
// at its bound would take 300 MB at 100,000 tasks, so past this the ring
// keeps fewer.
const (
	taskRingSize  = 100_000
	taskRingBytes = 96 << 20
)

// taskRing is a node's record of tasks: the latest state of each, merged
// from the events its processes report, at most max tasks and about
// maxBytes (taskEventSize each). When full, a new task evicts the task that finished (or failed) longest ago, else,
// with none finished, the oldest unfinished one; evicted counts them.
// Safe for concurrent use.
type taskRing struct {
	mu       sync.Mutex
	max      int
	maxBytes int
	bytes    int                      // taskEventSize of every task held
	byID     map[string]*list.Element // of *wire.TaskEvent, in live or done
	// live holds unfinished tasks in order of arrival, done finished ones
	// in the order they finished (front: oldest).
	live, done *list.List
	evicted    int64 // tasks dropped to stay within max
	dropped    int64 // events reporters said they dropped
}

func newTaskRing(max int) *taskRing {
	return &taskRing{max: max, maxBytes: taskRingBytes, byID: map[string]*list.Element{}, live: list.New(), done: list.New()}
}

// evictOne drops the task finished longest ago, else the oldest
// unfinished one.
func (r *taskRing) evictOne() {
	l := r.done
	if l.Len() == 0 {
		l = r.live
	}
	old := l.Remove(l.Front()).(*wire.TaskEvent)
	delete(r.byID, old.TaskID)
	r.bytes -= taskEventSize(old)
	r.evicted++
}

// add merges ev into the record (see wire.MergeTaskEvent).
func (r *taskRing) add(ev *wire.TaskEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.byID[ev.TaskID]; ok {
		cur := el.Value.(*wire.TaskEvent)
		wasDone := wire.TaskStateTerminal(cur.State)
		r.bytes -= taskEventSize(cur)
		wire.MergeTaskEvent(cur, ev)
		r.bytes += taskEventSize(cur)
		switch isDone := wire.TaskStateTerminal(cur.State); {
		case isDone && !wasDone:
			r.live.Remove(el)
			r.byID[ev.TaskID] = r.done.PushBack(cur)
		case !isDone && wasDone: // retried after a reported failure
			r.done.Remove(el)
			r.byID[ev.TaskID] = r.live.PushBack(cur)
		}
		for r.bytes > r.maxBytes && len(r.byID) > 1 {
			r.evictOne()
		}
		return
	}
	size := taskEventSize(ev)
	for len(r.byID) > 0 && (len(r.byID) >= r.max || r.bytes+size > r.maxBytes) {
		r.evictOne()
	}
	r.bytes += size
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
