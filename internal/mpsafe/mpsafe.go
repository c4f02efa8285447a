// Package mpsafe decodes msgpack that came from the network, where every
// byte may be hostile, so that a value's declared length cannot make the
// decoder allocate more than the bytes actually present.
//
// github.com/vmihailenco/msgpack/v5 (v5.4.1) sizes strings, bins, slices
// and maps from the length a value declares, before reading what follows:
//
//   - an array32 header (5 bytes) decoded into a slice allocates 4 Gi
//     elements: decodeSliceValue's 1 M-element cap is never applied (it
//     tests flags&disableAllocLimitFlag != 1, always true) and the
//     []interface{} path has no cap (upstream issue #401);
//   - a bin32 header decoded into a []byte allocates, and then zeroes,
//     4 GiB;
//   - a str32 header grows the decoder's scratch buffer by up to 1 MiB
//     (append then adds a quarter), and the buffer is kept even when the
//     read fails, so a pooled decoder grows with every such value;
//   - map16/map32 and []string headers pre-size up to a million entries.
//
// Check walks the encoding first, without allocating, and rejects any value
// whose declared size exceeds the bytes left; an element takes at least one
// byte, so after it the decoder's allocations are bounded by len(input)
// elements (each the size of its Go type) and len(input) bytes of strings.
// It also bounds nesting, since the decoder recurses once per level.
// Unmarshal is Check followed by Decode, a pooled decode that never pools
// a decoder whose scratch buffer an input may have grown.
package mpsafe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxDepth is the deepest nesting of arrays and maps Check accepts: the
// top-level value is at depth 0, its elements at depth 1.
const MaxDepth = 100

// ErrMalformed is wrapped by the errors of Check and Unmarshal for input
// that is not exactly one msgpack value within the limits above.
var ErrMalformed = errors.New("malformed msgpack")

// Check reports whether b holds exactly one msgpack value whose every
// declared length fits in the bytes that follow it (an array of n elements
// needs at least n bytes, a map of n entries 2n) and whose arrays and maps
// nest at most MaxDepth deep. The error wraps ErrMalformed and names the
// offending byte offset. Check does not allocate.
func Check(b []byte) error {
	var open [MaxDepth + 1]int // values still to read in each open container; open[0] is the top level
	open[0] = 1
	depth, off := 0, 0
	for depth >= 0 {
		if open[depth] == 0 {
			depth--
			continue
		}
		open[depth]--
		h, err := readHead(b[off:])
		if err != nil {
			return fmt.Errorf("%w: %v at offset %d", ErrMalformed, err, off)
		}
		rest := len(b) - off - h.size
		switch {
		case h.skip > rest:
			return fmt.Errorf("%w: value at offset %d declares %d bytes, %d follow", ErrMalformed, off, h.skip, rest)
		case h.elems > rest:
			return fmt.Errorf("%w: container at offset %d declares %d elements, %d bytes follow", ErrMalformed, off, h.elems, rest)
		case h.elems > 0 && depth == MaxDepth:
			return fmt.Errorf("%w: container at offset %d nests deeper than %d", ErrMalformed, off, MaxDepth)
		}
		off += h.size + h.skip
		if h.elems > 0 {
			depth++
			open[depth] = h.elems
		}
	}
	if off != len(b) {
		return fmt.Errorf("%w: %d bytes after the value, which ends at offset %d", ErrMalformed, len(b)-off, off)
	}
	return nil
}

// head is one value's header: size bytes of type code and lengths, then
// skip bytes of payload (string, bin, ext or number), or elems values
// (array elements, or map keys and values).
type head struct {
	size, skip, elems int
}

// errTruncated reports a header cut short by the end of the input.
var errTruncated = errors.New("header cut short")

// readHead decodes the header of the value at the start of p.
func readHead(p []byte) (head, error) {
	if len(p) == 0 {
		return head{}, errTruncated
	}
	c := p[0]
	switch {
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		return head{size: 1}, nil
	case c <= 0x8f: // fixmap
		return head{size: 1, elems: 2 * int(c&0x0f)}, nil
	case c <= 0x9f: // fixarray
		return head{size: 1, elems: int(c & 0x0f)}, nil
	case c <= 0xbf: // fixstr
		return head{size: 1, skip: int(c & 0x1f)}, nil
	}
	switch c {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return head{size: 1}, nil
	case 0xcc, 0xd0: // uint8, int8
		return head{size: 1, skip: 1}, nil
	case 0xcd, 0xd1: // uint16, int16
		return head{size: 1, skip: 2}, nil
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return head{size: 1, skip: 4}, nil
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return head{size: 1, skip: 8}, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext1..fixext16: a type byte and 1..16 bytes
		return head{size: 1, skip: 1 + 1<<(c-0xd4)}, nil
	case 0xc4, 0xc5, 0xc6: // bin8, bin16, bin32: a 1, 2 or 4-byte length
		return sized(p, 1<<(c-0xc4), 0, 0)
	case 0xd9, 0xda, 0xdb: // str8, str16, str32
		return sized(p, 1<<(c-0xd9), 0, 0)
	case 0xc7, 0xc8, 0xc9: // ext8, ext16, ext32: the length, then a type byte
		return sized(p, 1<<(c-0xc7), 1, 0)
	case 0xdc, 0xdd: // array16, array32: a 2 or 4-byte element count
		return sized(p, 2<<(c-0xdc), 0, 1)
	case 0xde, 0xdf: // map16, map32: an entry is two values
		return sized(p, 2<<(c-0xde), 0, 2)
	}
	return head{}, fmt.Errorf("reserved type code 0x%02x", c) // 0xc1
}

// sized decodes the header at the start of p of a value whose type code
// is followed by a big-endian length of lenBytes bytes and, for an ext,
// extType (1) type byte. The length counts payload bytes when perElem is
// 0, else elements of perElem values each (1 for an array, 2 for a map).
func sized(p []byte, lenBytes, extType, perElem int) (head, error) {
	if len(p) < 1+lenBytes+extType {
		return head{}, errTruncated
	}
	n := readUint(p[1 : 1+lenBytes])
	h := head{size: 1 + lenBytes + extType}
	if perElem == 0 {
		h.skip = n
	} else {
		h.elems = n * perElem
	}
	return h, nil
}

// readUint decodes a big-endian length of 1, 2 or 4 bytes.
func readUint(b []byte) int {
	switch len(b) {
	case 1:
		return int(b[0])
	case 2:
		return int(binary.BigEndian.Uint16(b))
	}
	return int(binary.BigEndian.Uint32(b))
}

// maxPooledInput is the largest input, in bytes, after which Unmarshal
// returns its decoder to the pool: the decoder's scratch buffer grows to
// about the longest string decoded, and a pooled one would keep it.
const maxPooledInput = 64 << 10

// decoder pairs a msgpack decoder with the reader it reads from, so that
// pooling both keeps decoding free of allocations apart from the values
// made.
type decoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decoders = sync.Pool{New: func() any {
	d := new(decoder)
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

// Unmarshal is msgpack.Unmarshal(b, v) for bytes from the network: b must
// pass Check (else the error wraps ErrMalformed and v is untouched), and
// is then decoded with a pooled decoder. Errors from decoding into v (a
// type mismatch) come from the msgpack package.
func Unmarshal(b []byte, v any) error {
	if err := Check(b); err != nil {
		return err
	}
	return Decode(b, v)
}

// Decode is Unmarshal without the Check, for b that has passed Check
// already (rpc's server checks every request body as it reads it, before
// a handler decodes it). On b that has not, it is as unsafe as
// msgpack.Unmarshal.
func Decode(b []byte, v any) error {
	d := decoders.Get().(*decoder)
	d.r.Reset(b)
	d.dec.Reset(&d.r)
	d.dec.UsePreallocateValues(true) // as msgpack.Unmarshal does
	err := d.dec.Decode(v)
	d.r.Reset(nil) // drop the reference to b
	if len(b) <= maxPooledInput {
		decoders.Put(d)
	}
	return err
}
