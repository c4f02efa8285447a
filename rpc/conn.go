package rpc

import (
	"bufio"
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nodeup/nodeup/internal/mpsafe"
)

const (
	// bufSize is a client connection's read buffer size, and the size of
	// the write buffers connections borrow while writing, in bytes.
	bufSize = 32 << 10
	// writeStallTimeout bounds how long a write may block on a peer that
	// stops reading (hung process, network partition). When it fires the
	// connection is closed and every pending call fails, instead of
	// writers queueing forever behind the write lock.
	writeStallTimeout = 60 * time.Second
	// maxPooledBuf keeps one huge body from pinning its buffer in the pool.
	maxPooledBuf = 1 << 20
)

// frameWriter serialises frame writes on a connection. Writers that find
// others queued behind them skip the flush and leave it to the last one, so
// concurrent calls share syscalls without a dedicated writer goroutine.
// The buffer is borrowed from writeBufs for the duration of a burst of
// writes and returned after the flush that ends it, so an idle connection
// holds none.
type frameWriter struct {
	conn    net.Conn
	queued  atomic.Int32 // writers waiting for or holding mu
	mu      sync.Mutex
	bw      *bufio.Writer // nil between bursts
	stallAt time.Time     // write deadline currently set on conn
}

// writeBufs holds the write buffers of connections not writing.
var writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufSize) }}

func newFrameWriter(conn net.Conn) *frameWriter {
	return &frameWriter{conn: conn}
}

// write sends f, with tail (may be nil) appended to its payload after
// f.Body. An error other than ErrFrameTooLarge means the connection is
// unusable and must be closed.
func (w *frameWriter) write(f *Frame, tail []byte) error {
	w.queued.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bw == nil {
		w.bw = writeBufs.Get().(*bufio.Writer)
		w.bw.Reset(w.conn)
	}
	// Refresh the stall deadline only when half of it is used up, which
	// keeps SetWriteDeadline off the per-call path.
	if now := time.Now(); w.stallAt.Sub(now) < writeStallTimeout/2 {
		w.stallAt = now.Add(writeStallTimeout)
		_ = w.conn.SetWriteDeadline(w.stallAt) // unsupported deadlines just disable the guard
	}
	err := writeFrame(w.bw, f, tail)
	// Flush even when our own frame was refused: earlier writers may have
	// left theirs in the buffer for us to flush.
	if w.queued.Add(-1) == 0 {
		if ferr := w.bw.Flush(); err == nil {
			err = ferr
		}
		w.bw.Reset(nil) // drops what a failed flush left: the connection is done for
		writeBufs.Put(w.bw)
		w.bw = nil
	}
	return err
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// encodeBody msgpack-encodes v into a pooled buffer; release it with
// putBuf once the bytes have been written.
func encodeBody(v any) (*bytes.Buffer, error) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	enc := msgpack.GetEncoder()
	enc.Reset(buf)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	if err != nil {
		putBuf(buf)
		return nil, err
	}
	return buf, nil
}

func putBuf(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBuf {
		bufPool.Put(buf)
	}
}

// decodeBody decodes the msgpack body b into v. b comes from the network:
// mpsafe checks that no declared length exceeds the bytes present before
// the decoder allocates anything (errors then wrap mpsafe.ErrMalformed).
func decodeBody(b []byte, v any) error {
	return mpsafe.Unmarshal(b, v)
}
