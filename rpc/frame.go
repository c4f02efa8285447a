package rpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// MaxFrameSize is the largest payload, in bytes, a frame may carry (the
// 4-byte length prefix excluded). Readers reject larger length prefixes
// before allocating; writers refuse to send larger frames.
const MaxFrameSize = 64 << 20

// Kind says what a frame is.
type Kind uint8

const (
	// KindRequest is a call from client to server.
	KindRequest Kind = 0
	// KindResponse is a successful answer; Body holds the result.
	KindResponse Kind = 1
	// KindError is a failed answer; Error and Code describe the failure.
	KindError Kind = 2
)

// String returns the kind's name, for logs.
func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	case KindError:
		return "error"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Frame is one protocol message. See the package documentation for its wire
// encoding.
type Frame struct {
	// Seq matches a response to its request; the client picks it.
	Seq uint64
	// Kind is request, response or error response.
	Kind Kind
	// Method is the "Service.Method" name; empty in responses.
	Method string
	// Error is the error message of an error response.
	Error string
	// Code is the error code of an error response.
	Code string
	// Body is the msgpack-encoded argument or result. ReadFrame returns a
	// slice of a fresh buffer that the caller owns.
	Body []byte
}

// ErrFrameTooLarge is returned (wrapped) by ReadFrame for a length prefix
// above MaxFrameSize, and by WriteFrame and Client.Call for a frame that
// would exceed it.
var ErrFrameTooLarge = errors.New("rpc: frame too large")

// ErrMalformedFrame is returned (wrapped) by ReadFrame when the payload is
// not a valid frame.
var ErrMalformedFrame = errors.New("rpc: malformed frame")

// readChunk bounds how much ReadFrame allocates ahead of data actually
// received, in bytes, so a peer cannot make us allocate 64 MiB by sending a
// length prefix and nothing else: the payload buffer starts at this size
// and doubles only when full.
const readChunk = 64 << 10

// ReadFrame reads one frame from r. It returns io.EOF if r ends cleanly
// before a frame starts, io.ErrUnexpectedEOF if it ends inside one, an error
// wrapping ErrFrameTooLarge for a length prefix above MaxFrameSize, an error
// wrapping ErrMalformedFrame for an undecodable payload, or r's read error.
// The payload buffer it allocates is at most twice the bytes actually
// received plus 64 KiB. It does not look inside the body.
func ReadFrame(r *bufio.Reader) (*Frame, error) {
	f := new(Frame)
	if err := readFrame(r, f); err != nil {
		return nil, err
	}
	return f, nil
}

func readFrame(r *bufio.Reader, f *Frame) error {
	rest, err := readFrameHead(r, f, MaxFrameSize)
	if err == nil && rest > 0 {
		f.Body, err = readPayload(r, rest)
	}
	return err
}

// readFrameHead reads a frame's length prefix and header into f and returns
// the number of body bytes that follow in r, still unread, so that a caller
// can route the body (Client.CallInto reads it straight into its buffer).
// The header is decoded from r's buffer without copying the payload; a
// header longer than that buffer (a long error message) makes it read the
// whole payload instead, set f.Body and return 0. Errors are ReadFrame's,
// with limit (at most MaxFrameSize) in place of MaxFrameSize.
func readFrameHead(r *bufio.Reader, f *Frame, limit int) (rest int, err error) {
	p, err := r.Peek(4)
	if err != nil {
		if len(p) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	n := binary.BigEndian.Uint32(p)
	_, _ = r.Discard(4) // cannot fail: the 4 bytes are buffered
	if uint64(n) > uint64(limit) {
		return 0, fmt.Errorf("%w: length prefix %d bytes exceeds %d", ErrFrameTooLarge, n, limit)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: empty payload", ErrMalformedFrame)
	}
	// Peek at most the buffer size: it blocks until that much has arrived,
	// which a frame of n bytes delivers, and allocates nothing.
	want := min(int(n), r.Size())
	p, err = r.Peek(want)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	hl, err := decodeHeader(p, f)
	if err == nil {
		_, _ = r.Discard(hl) // buffered
		return int(n) - hl, nil
	}
	if want == int(n) {
		return 0, err // the whole payload was there: it is malformed
	}
	payload, err := readPayload(r, int(n))
	if err != nil {
		return 0, err
	}
	if hl, err = decodeHeader(payload, f); err != nil {
		return 0, err
	}
	f.Body = payload[hl:]
	return 0, nil
}

// readPayload reads exactly n bytes, growing the buffer only as data
// arrives (doubling from readChunk).
func readPayload(r *bufio.Reader, n int) ([]byte, error) {
	buf := make([]byte, min(n, readChunk))
	got := 0
	for {
		m, err := io.ReadFull(r, buf[got:])
		got += m
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		grow := min(2*len(buf), n) - len(buf)
		buf = append(buf, make([]byte, grow)...)
	}
}

// WriteFrame writes f to w without flushing it. It returns an error wrapping
// ErrFrameTooLarge, having written nothing, if the payload would exceed
// MaxFrameSize; otherwise w's write error.
func WriteFrame(w *bufio.Writer, f *Frame) error {
	return writeFrame(w, f, nil)
}

// writeFrame is WriteFrame for a payload of f's header, f.Body and then
// tail: a bulk result's bin header goes in f.Body and its bytes in tail,
// which a large tail makes bufio write straight from its memory.
func writeFrame(w *bufio.Writer, f *Frame, tail []byte) error {
	// AvailableBuffer lets the prefix and header be built in place without
	// an allocation in the common case.
	b := w.AvailableBuffer()
	b = append(b, 0, 0, 0, 0)
	b = appendHeader(b, f)
	size := len(b) - 4 + len(f.Body) + len(tail)
	if size > MaxFrameSize {
		return fmt.Errorf("%w: payload %d bytes exceeds %d", ErrFrameTooLarge, size, MaxFrameSize)
	}
	binary.BigEndian.PutUint32(b, uint32(size))
	if _, err := w.Write(b); err != nil {
		return err
	}
	if _, err := w.Write(f.Body); err != nil {
		return err
	}
	if len(tail) > 0 {
		_, err := w.Write(tail)
		return err
	}
	return nil
}

// headerLen is the number of elements in the header array.
const headerLen = 5

// Msgpack type codes used by the header codec.
const (
	mpFixArray = 0x90
	mpFixStr   = 0xa0
	mpNil      = 0xc0
	mpUint8    = 0xcc
	mpUint16   = 0xcd
	mpUint32   = 0xce
	mpUint64   = 0xcf
	mpInt8     = 0xd0
	mpInt16    = 0xd1
	mpInt32    = 0xd2
	mpInt64    = 0xd3
	mpStr8     = 0xd9
	mpStr16    = 0xda
	mpStr32    = 0xdb
	mpArray16  = 0xdc
	mpArray32  = 0xdd
	mpBin8     = 0xc4
	mpBin16    = 0xc5
	mpBin32    = 0xc6
)

// appendBinHeader appends the shortest msgpack bin header for n bytes.
func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, mpBin8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpBin16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, mpBin32), uint32(n))
}

// The header is encoded by hand: five fixed fields do not need the
// reflection-driven msgpack encoder, and this path runs twice per call.
func appendHeader(b []byte, f *Frame) []byte {
	b = append(b, mpFixArray|headerLen)
	b = appendUint(b, f.Seq)
	b = appendUint(b, uint64(f.Kind))
	b = appendStr(b, f.Method)
	b = appendStr(b, f.Error)
	return appendStr(b, f.Code)
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, mpUint8, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, mpUint64), v)
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n <= 31:
		b = append(b, mpFixStr|byte(n))
	case n <= math.MaxUint8:
		b = append(b, mpStr8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpStr16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(n))
	}
	return append(b, s...)
}

// decodeHeader parses the frame header at the start of p into f (Body
// untouched) and returns its length in bytes.
func decodeHeader(p []byte, f *Frame) (int, error) {
	d := headerDecoder{p: p}
	n := d.arrayLen()
	if d.err == nil && n != headerLen {
		return 0, fmt.Errorf("%w: header has %d elements, want %d", ErrMalformedFrame, n, headerLen)
	}
	f.Seq = d.uint()
	kind := d.uint()
	f.Method = d.str()
	f.Error = d.str()
	f.Code = d.str()
	if d.err != nil {
		return 0, d.err
	}
	if kind > uint64(KindError) {
		return 0, fmt.Errorf("%w: unknown kind %d", ErrMalformedFrame, kind)
	}
	f.Kind = Kind(kind)
	return d.off, nil
}

// headerDecoder reads msgpack values from a byte slice, remembering the
// first error so callers can decode all fields and check once.
type headerDecoder struct {
	p   []byte
	off int
	err error
}

func (d *headerDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s at header offset %d", ErrMalformedFrame, what, d.off)
	}
}

// take returns the next n bytes, or nil and records an error if fewer
// remain.
func (d *headerDecoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.p)-d.off {
		d.fail(what)
		return nil
	}
	b := d.p[d.off : d.off+n]
	d.off += n
	return b
}

func (d *headerDecoder) code(what string) (byte, bool) {
	b := d.take(1, what)
	if b == nil {
		return 0, false
	}
	return b[0], true
}

func (d *headerDecoder) arrayLen() int {
	c, ok := d.code("array")
	if !ok {
		return 0
	}
	switch {
	case c&0xf0 == mpFixArray:
		return int(c & 0x0f)
	case c == mpArray16:
		if b := d.take(2, "array"); b != nil {
			return int(binary.BigEndian.Uint16(b))
		}
	case c == mpArray32:
		if b := d.take(4, "array"); b != nil {
			return int(binary.BigEndian.Uint32(b))
		}
	default:
		d.fail("array")
	}
	return 0
}

func (d *headerDecoder) uint() uint64 {
	c, ok := d.code("integer")
	if !ok {
		return 0
	}
	var v int64
	switch {
	case c <= 0x7f:
		return uint64(c)
	case c == mpUint8:
		if b := d.take(1, "integer"); b != nil {
			return uint64(b[0])
		}
		return 0
	case c == mpUint16:
		if b := d.take(2, "integer"); b != nil {
			return uint64(binary.BigEndian.Uint16(b))
		}
		return 0
	case c == mpUint32:
		if b := d.take(4, "integer"); b != nil {
			return uint64(binary.BigEndian.Uint32(b))
		}
		return 0
	case c == mpUint64:
		if b := d.take(8, "integer"); b != nil {
			return binary.BigEndian.Uint64(b)
		}
		return 0
	case c == mpInt8:
		if b := d.take(1, "integer"); b != nil {
			v = int64(int8(b[0]))
		}
	case c == mpInt16:
		if b := d.take(2, "integer"); b != nil {
			v = int64(int16(binary.BigEndian.Uint16(b)))
		}
	case c == mpInt32:
		if b := d.take(4, "integer"); b != nil {
			v = int64(int32(binary.BigEndian.Uint32(b)))
		}
	case c == mpInt64:
		if b := d.take(8, "integer"); b != nil {
			v = int64(binary.BigEndian.Uint64(b))
		}
	default:
		d.fail("integer")
		return 0
	}
	if v < 0 {
		d.fail("integer")
		return 0
	}
	return uint64(v)
}

func (d *headerDecoder) str() string {
	c, ok := d.code("string")
	if !ok {
		return ""
	}
	var n int
	switch {
	case c&0xe0 == mpFixStr:
		n = int(c & 0x1f)
	case c == mpNil:
		return ""
	case c == mpStr8:
		if b := d.take(1, "string"); b != nil {
			n = int(b[0])
		}
	case c == mpStr16:
		if b := d.take(2, "string"); b != nil {
			n = int(binary.BigEndian.Uint16(b))
		}
	case c == mpStr32:
		if b := d.take(4, "string"); b != nil {
			n = int(binary.BigEndian.Uint32(b))
		}
	default:
		d.fail("string")
		return ""
	}
	b := d.take(n, "string")
	if b == nil {
		return ""
	}
	return string(b)
}
