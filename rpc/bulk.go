package rpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Bulk is a handler result that carries bytes without encoding them: the
// response body is a msgpack bin (the same bytes Call would decode into a
// *[]byte) whose contents the server writes to the connection straight from
// Data, with no copy into an encoding buffer. Client.CallInto reads such a
// body straight into the caller's buffer. A handler returns *Bulk as its
// result (with Handle, use Bulk as the response type).
//
// Data must hold at most MaxFrameSize bytes less the frame header; a larger
// result is answered with an error response of code "internal". The server
// does not keep Data after the response is written.
type Bulk struct {
	// Data is the result's bytes, written as one msgpack bin.
	Data []byte
	// Release, if not nil, is called exactly once when Data is no longer
	// needed: after the response is written or has failed to be.
	Release func()
}

// release calls b.Release once.
func (b *Bulk) release() {
	if b.Release != nil {
		b.Release()
		b.Release = nil
	}
}

// errBulkBody marks a response body that CallInto cannot take: not a single
// msgpack bin, or one longer than the caller's buffer. The body is consumed
// and the connection stays usable.
var errBulkBody = errors.New("bulk result")

// readBulk reads a response body of rest bytes from r that must be exactly
// one msgpack bin, copying the bin's contents straight into dst, and returns
// their count. A body that is not such a bin, or whose bin exceeds dst, is
// skipped and reported as bad (an error wrapping errBulkBody): the frame's
// length keeps the stream in step. connErr is a read error: the connection
// is broken.
func readBulk(r *bufio.Reader, rest int, dst []byte) (n int, bad, connErr error) {
	skip := func(format string, args ...any) (int, error, error) {
		if _, err := r.Discard(rest); err != nil {
			return 0, nil, unexpectedEOF(err)
		}
		return 0, fmt.Errorf("%w: %s", errBulkBody, fmt.Sprintf(format, args...)), nil
	}
	if rest == 0 {
		return 0, fmt.Errorf("%w: empty body, want a msgpack bin", errBulkBody), nil
	}
	code, err := r.ReadByte()
	if err != nil {
		return 0, nil, unexpectedEOF(err)
	}
	rest--
	var hl int
	switch code {
	case mpBin8:
		hl = 1
	case mpBin16:
		hl = 2
	case mpBin32:
		hl = 4
	default:
		return skip("body starts with msgpack type 0x%02x, want a bin", code)
	}
	if rest < hl {
		return skip("bin header cut short")
	}
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[4-hl:]); err != nil {
		return 0, nil, unexpectedEOF(err)
	}
	rest -= hl
	l := int(binary.BigEndian.Uint32(lb[:]))
	switch {
	case l != rest:
		return skip("bin of %d bytes in a body with %d bytes after its header", l, rest)
	case l > len(dst):
		return skip("result of %d bytes exceeds the %d-byte buffer", l, len(dst))
	}
	if _, err := io.ReadFull(r, dst[:l]); err != nil {
		return 0, nil, unexpectedEOF(err)
	}
	return l, nil, nil
}

// unexpectedEOF turns io.EOF, which inside a frame means a truncated one,
// into io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
