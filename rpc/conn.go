package rpc

import (
	"bufio"
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

const (
	// bufSize is the read and write buffer size per connection, in bytes.
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
type frameWriter struct {
	conn    net.Conn
	queued  atomic.Int32 // writers waiting for or holding mu
	mu      sync.Mutex
	bw      *bufio.Writer
	stallAt time.Time // write deadline currently set on conn
}

func newFrameWriter(conn net.Conn) *frameWriter {
	return &frameWriter{conn: conn, bw: bufio.NewWriterSize(conn, bufSize)}
}

// write sends f, with tail (may be nil) appended to its payload after
// f.Body. An error other than ErrFrameTooLarge means the connection is
// unusable (bufio errors are sticky) and must be closed.
func (w *frameWriter) write(f *Frame, tail []byte) error {
	w.queued.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
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

// bodyDecoder pairs a msgpack decoder with the reader it reads from, so
// pooling both keeps decoding allocation-free apart from the values made.
type bodyDecoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decPool = sync.Pool{New: func() any {
	d := new(bodyDecoder)
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

// decodeBody is msgpack.Unmarshal(b, v) without the per-call reader
// allocation.
func decodeBody(b []byte, v any) error {
	d := decPool.Get().(*bodyDecoder)
	d.r.Reset(b)
	d.dec.Reset(&d.r)
	d.dec.UsePreallocateValues(true) // as msgpack.Unmarshal does
	err := d.dec.Decode(v)
	d.r.Reset(nil) // drop the reference to b
	decPool.Put(d)
	return err
}
