package worker

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/nodeup/nodeup/wire"
)

// Task event reporting (Ray's task events): the owner and the executing
// worker record each task state change here; a goroutine sends them to
// this process's node in batches. Recording never blocks on the network:
// past taskEventsMaxBuffered events it drops and counts.
//
// A worker process reports every 100 ms rather than 500: its node kills it
// when the job ends, and what it has not sent by then is lost (a driver
// sends what it holds in Shutdown).
const (
	taskEventsFlushEvery   = 500 * time.Millisecond
	workerEventsFlushEvery = 100 * time.Millisecond
	taskEventsMaxBuffered  = 10 * wire.MaxTaskEventBatch
	taskEventsCallTimeout  = 5 * time.Second
)

// taskEvents buffers this process's task events for its node.
type taskEvents struct {
	cw       *coreWorker
	workerID string // this worker process's ID from its node; "" in a driver
	pid      int

	start   sync.Once
	kick    chan struct{} // a full batch is waiting
	flushMu sync.Mutex    // one send at a time

	mu  sync.Mutex
	buf []wire.TaskEvent
	// at indexes buf by task ID: a task's changes between two reports
	// are merged into one event (wire.MergeTaskEvent), so a short task
	// costs its node one event from its owner and one from its worker.
	at      map[string]int
	dropped int64 // since the last report
}

func newTaskEvents(cw *coreWorker) *taskEvents {
	return &taskEvents{cw: cw, workerID: os.Getenv(wire.EnvWorkerID), pid: os.Getpid(), kick: make(chan struct{}, 1), at: map[string]int{}}
}

// record buffers ev, stamped with now for its state.
func (e *taskEvents) record(ev wire.TaskEvent) {
	if e == nil {
		return
	}
	if at := ev.Times.At(ev.State); at != nil && *at == 0 {
		*at = time.Now().UnixNano()
	}
	e.start.Do(func() { go e.loop() })
	e.mu.Lock()
	if i, ok := e.at[ev.TaskID]; ok {
		wire.MergeTaskEvent(&e.buf[i], &ev)
		e.mu.Unlock()
		return
	}
	if len(e.buf) >= taskEventsMaxBuffered {
		e.dropped++
		e.mu.Unlock()
		return
	}
	e.at[ev.TaskID] = len(e.buf)
	e.buf = append(e.buf, ev)
	full := len(e.buf) >= wire.MaxTaskEventBatch
	e.mu.Unlock()
	if full {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
}

// loop sends buffered events every taskEventsFlushEvery, or sooner when a
// batch is full, until the process's ctx ends.
func (e *taskEvents) loop() {
	every := taskEventsFlushEvery
	if e.cw.isWorker {
		every = workerEventsFlushEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.cw.ctx.Done():
			return
		case <-t.C:
		case <-e.kick:
		}
		e.flush(e.cw.ctx)
	}
}

// flush sends every buffered event, in batches of at most
// MaxTaskEventBatch. A batch the node does not take is dropped (counted
// in the next report): task events are best effort, as Ray's. Events that
// would not pass the node's checks (wire.CheckTaskEvent) are dropped
// here, so one cannot cost a whole batch.
func (e *taskEvents) flush(ctx context.Context) {
	if e == nil || e.cw.nodeAddr == "" {
		return
	}
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	for ctx.Err() == nil {
		e.mu.Lock()
		n := min(len(e.buf), wire.MaxTaskEventBatch)
		batch := make([]wire.TaskEvent, 0, n)
		for i := range n {
			if e.buf[i].TaskID == "" {
				continue // retracted
			}
			if wire.CheckTaskEvent(&e.buf[i]) == nil {
				batch = append(batch, e.buf[i])
			} else {
				e.dropped++
			}
		}
		e.buf = append(e.buf[:0], e.buf[n:]...)
		clear(e.at)
		for i := range e.buf {
			e.at[e.buf[i].TaskID] = i
		}
		dropped := e.dropped
		e.dropped = 0
		e.mu.Unlock()
		if len(batch) == 0 && dropped == 0 {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, taskEventsCallTimeout)
		err := e.cw.pool.Call(cctx, e.cw.nodeAddr, wire.MethodTaskEventsReport, &wire.TaskEventsReport{Events: batch, Dropped: dropped}, nil)
		cancel()
		if err != nil {
			e.cw.logger.Debug("report task events to the node; dropping them", "node", e.cw.nodeAddr, "events", len(batch), "err", err)
			e.mu.Lock()
			e.dropped += dropped + int64(len(batch))
			e.mu.Unlock()
			return
		}
		if n == 0 {
			return
		}
	}
}

// retract drops the buffered, unsent event of task id and reports
// whether there was one.
func (e *taskEvents) retract(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	i, ok := e.at[id]
	if ok {
		delete(e.at, id)
		e.buf[i] = wire.TaskEvent{} // skipped by flush
	}
	return ok
}

// ownerTaskEvent is the event of an owner-side state change of task t.
func (cw *coreWorker) ownerTaskEvent(spec *wire.TaskSpec, attempt int, state string) wire.TaskEvent {
	return wire.TaskEvent{TaskID: spec.TaskID, JobID: spec.JobID, Name: spec.Name, Function: spec.Function, Type: wire.TaskTypeNormal,
		State: state, Attempt: attempt, Owner: spec.Owner}
}

// noteTask records an owner-side state change of t at its current attempt
// (no node named: pending).
func (s *submitter) noteTask(t *pendingTask, state string) {
	s.cw.events.record(s.cw.ownerTaskEvent(&t.spec, t.crashes+t.appRetries, state))
}

// noteTaskFailed records that t failed with err.
func (s *submitter) noteTaskFailed(t *pendingTask, err error) {
	ev := s.cw.ownerTaskEvent(&t.spec, t.crashes+t.appRetries, wire.TaskFailed)
	ev.Error = wire.ClipTaskError(err.Error())
	s.cw.events.record(ev)
}

// failTask fails t's return objects with err and records it.
func (s *submitter) failTask(t *pendingTask, err error) {
	s.noteTaskFailed(t, err)
	s.cw.objects.failAll(t.ids, err)
}

// noteOnLease records an owner-side state change of t on lease l's
// worker; runNanos (the worker's PushTaskReply.RunNanos, 0 if none) dates
// when it started running.
func (s *submitter) noteOnLease(t *pendingTask, l *heldLease, attempt int, state string, err error, runNanos int64) {
	ev := s.cw.ownerTaskEvent(&t.spec, attempt, state)
	ev.NodeID, ev.NodeName, ev.WorkerID, ev.PID = l.rep.NodeID, l.rep.NodeName, l.rep.WorkerID, l.rep.WorkerPID
	if runNanos > 0 {
		now := time.Now().UnixNano()
		*ev.Times.At(state) = now
		ev.Times.Running = now - runNanos
	}
	if err != nil {
		ev.Error = wire.ClipTaskError(err.Error())
	}
	s.cw.events.record(ev)
}

// executorTaskEvent is the event of a state change of a task this worker
// process runs: RUNNING, FINISHED, or FAILED with f's message.
func (cw *coreWorker) executorTaskEvent(spec *wire.TaskSpec, state string, f *wire.TaskFailure) {
	if cw.events == nil {
		return
	}
	ev := wire.TaskEvent{TaskID: spec.TaskID, JobID: spec.JobID, Name: spec.Name, Function: spec.Function, Type: wire.TaskTypeNormal,
		State: state, Attempt: spec.Attempt, NodeID: cw.nodeID, NodeName: cw.nodeName, WorkerID: cw.events.workerID,
		PID: cw.events.pid, Owner: spec.Owner}
	inst := cw.actor.Load()
	if inst != nil {
		ev.Type, ev.ActorID = wire.TaskTypeActor, inst.id
	} else if wire.TaskStateTerminal(state) && cw.events.retract(spec.TaskID) {
		// Its RUNNING was not sent yet: the owner reports the outcome,
		// with the worker's PID and run time, so the node gets one event
		// for a short task rather than two.
		return
	}
	if f != nil {
		ev.Error = wire.ClipTaskError(f.Message)
	}
	cw.events.record(ev)
}
