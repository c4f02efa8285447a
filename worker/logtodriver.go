package worker

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/nodeup/nodeup/internal/logfollow"
	"github.com/nodeup/nodeup/wire"
)

// LogToDriver turns on (the default) or off the streaming of this job's
// worker and actor output to the driver's stdout, as Ray's
// ray.init(log_to_driver=...): the driver polls its node (every 300 ms,
// Logs.List and Logs.Read over every node) and prints each line of its
// job's processes prefixed "(<actor class, or task> pid=<pid> node=<node
// name>) ". An identical line printed by several processes within one poll
// is printed once, with " [repeated Nx across cluster]", as Ray's log
// deduplication. The files stay on the nodes either way (`nodeup logs`).
// Only a driver streams; a worker process ignores the option.
func LogToDriver(on bool) InitOption {
	return func(c *initConfig) { c.noLogToDriver = !on }
}

// logToDriverInterval is how often the driver polls for new output.
const logToDriverInterval = 300 * time.Millisecond

// logToDriverDrain bounds the last poll at Shutdown, which prints what
// the job's processes wrote just before it.
const logToDriverDrain = time.Second

// driverLogOutput is where the streamed lines go (tests replace it).
var driverLogOutput io.Writer = os.Stdout

// logStreamer is a driver's log_to_driver poller.
type logStreamer struct {
	fl     *logfollow.Follower
	out    io.Writer
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // serializes polls: the loop's and the final drain
	batch  []logLine
	// bytes is the text in batch: past maxLogBatch it is printed before
	// the poll ends, so a busy job never makes the driver hold more.
	bytes int
}

// maxLogBatch bounds the output a driver holds for deduplication.
const maxLogBatch = 4 << 20

type logLine struct {
	f    wire.LogFile
	text string
}

// startLogStreamer starts polling the node for the job's output.
func (cw *coreWorker) startLogStreamer() {
	s := &logStreamer{out: driverLogOutput, done: make(chan struct{})}
	s.fl = &logfollow.Follower{
		Call: func(ctx context.Context, method string, req, resp any) error {
			return cw.pool.Call(ctx, cw.nodeAddr, method, req, resp)
		},
		List: wire.LogsListRequest{Job: cw.jobID, Cluster: true},
		Line: func(f wire.LogFile, line []byte) {
			s.batch = append(s.batch, logLine{f, string(line)})
			if s.bytes += len(line); s.bytes > maxLogBatch {
				s.print()
			}
		},
	}
	var ctx context.Context
	ctx, s.cancel = context.WithCancel(context.Background())
	cw.logs = s
	go func() {
		defer close(s.done)
		tick := time.NewTicker(logToDriverInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := s.poll(ctx); err != nil && ctx.Err() == nil {
				cw.logger.Debug("log_to_driver: poll the node", "err", err)
			}
		}
	}()
}

// poll reads what the job's processes wrote since the last poll and
// prints it, identical lines of several processes collapsed.
func (s *logStreamer) poll(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.fl.Poll(ctx)
	s.print()
	return err
}

// print writes the batch in order; a text that several processes printed
// is written once, at its first place, with how many times it came.
func (s *logStreamer) print() {
	procs := map[string]map[string]bool{} // text → the files that printed it
	count := map[string]int{}
	for _, l := range s.batch {
		if procs[l.text] == nil {
			procs[l.text] = map[string]bool{}
		}
		procs[l.text][l.f.Addr+"/"+l.f.Name] = true
		count[l.text]++
	}
	done := map[string]bool{}
	for _, l := range s.batch {
		switch {
		case len(procs[l.text]) == 1:
			fmt.Fprintf(s.out, "%s%s\n", logfollow.Prefix(l.f), l.text)
		case !done[l.text]:
			done[l.text] = true
			fmt.Fprintf(s.out, "%s%s [repeated %dx across cluster]\n", logfollow.Prefix(l.f), l.text, count[l.text])
		}
	}
	s.batch, s.bytes = s.batch[:0], 0
}

// stop ends the polling and prints, within logToDriverDrain, what the
// job's processes wrote since the last poll.
func (s *logStreamer) stop() {
	s.cancel()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), logToDriverDrain)
	defer cancel()
	_ = s.poll(ctx)
}
