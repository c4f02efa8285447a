package rpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// pattern returns n bytes that differ from their neighbours.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

type bulkReq struct{ Off, Len int }

// bulkServer serves Test.Bulk: Len bytes of src from Off, as a *Bulk whose
// release is reported on released.
func bulkServer(src []byte, released chan<- int) *Server {
	s := newTestServer(nil)
	Handle(s, "Test.Bulk", func(ctx context.Context, r *bulkReq) (*Bulk, error) {
		return &Bulk{Data: src[r.Off : r.Off+r.Len], Release: func() { released <- r.Len }}, nil
	})
	s.Register("Test.HugeBulk", func(ctx context.Context, body []byte) (any, error) {
		return &Bulk{Data: make([]byte, MaxFrameSize), Release: func() { released <- -1 }}, nil
	})
	return s
}

func TestCallIntoReadsBulkResults(t *testing.T) {
	t.Parallel()
	src := pattern(5 << 20)
	released := make(chan int, 1)
	c := dialTCP(t, serveTCP(t, bulkServer(src, released)))
	ctx := context.Background()
	// Sizes that take each bin form (8, 16 and 32-bit lengths), and more than
	// the read buffer.
	for _, r := range []bulkReq{{0, 0}, {3, 200}, {1000, 70000}, {12345, 4 << 20}, {0, 5 << 20}} {
		dst := make([]byte, r.Len+10)
		n, err := c.CallInto(ctx, "Test.Bulk", &r, dst)
		if err != nil || n != r.Len || !bytes.Equal(dst[:n], src[r.Off:r.Off+r.Len]) {
			t.Fatalf("CallInto %+v: %d bytes, equal=%v, %v", r, n, bytes.Equal(dst[:n], src[r.Off:r.Off+r.Len]), err)
		}
		if l := <-released; l != r.Len {
			t.Fatalf("released %d, want %d", l, r.Len)
		}
		// The same body decodes with Call into a []byte: it is a plain bin.
		var b []byte
		if err := c.Call(ctx, "Test.Bulk", &r, &b); err != nil || !bytes.Equal(b, src[r.Off:r.Off+r.Len]) {
			t.Fatalf("Call %+v: %d bytes, %v", r, len(b), err)
		}
		<-released
	}
	// Too large for a frame: an internal error, and the bytes are released.
	_, err := c.CallInto(ctx, "Test.HugeBulk", nil, make([]byte, 10))
	var re *Error
	if !errors.As(err, &re) || re.Code != CodeInternal || !strings.Contains(re.Message, "frame too large") {
		t.Fatalf("huge bulk: %v", err)
	}
	if l := <-released; l != -1 {
		t.Fatalf("huge bulk released %d", l)
	}
	checkEcho(t, c, 4)
}

func TestCallIntoRejectsWhatDoesNotFit(t *testing.T) {
	t.Parallel()
	src := pattern(1 << 20)
	released := make(chan int, 1)
	c := dialTCP(t, serveTCP(t, bulkServer(src, released)))
	ctx := context.Background()

	// Longer than the buffer: a local error; the body is skipped.
	_, err := c.CallInto(ctx, "Test.Bulk", &bulkReq{0, 1 << 20}, make([]byte, 1000))
	<-released
	if err == nil || IsTransport(err) || !strings.Contains(err.Error(), "exceeds the 1000-byte buffer") || !strings.Contains(err.Error(), "Test.Bulk") {
		t.Fatalf("oversized result: %v", err)
	}
	// Not a bin (a map).
	_, err = c.CallInto(ctx, "Test.Echo", &echoReq{N: 1}, make([]byte, 1000))
	if err == nil || IsTransport(err) || !strings.Contains(err.Error(), "want a bin") {
		t.Fatalf("map result: %v", err)
	}
	// Error responses are *Error, as for Call.
	_, err = c.CallInto(ctx, "Test.Fail", &echoReq{Text: "chunk"}, make([]byte, 10))
	var re *Error
	if !errors.As(err, &re) || re.Code != "not_found" {
		t.Fatalf("error response: %v", err)
	}
	// The connection is still in step.
	checkEcho(t, c, 5)
	dst := make([]byte, 100)
	if n, err := c.CallInto(ctx, "Test.Bulk", &bulkReq{5, 100}, dst); err != nil || n != 100 || !bytes.Equal(dst, src[5:105]) {
		t.Fatalf("after the rejections: %d, %v", n, err)
	}
	<-released
}

func TestCallIntoCancelledBeforeTheAnswerLeavesDstAlone(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	written := make(chan struct{})
	s := newTestServer(release)
	s.Register("Test.BlockBulk", func(ctx context.Context, body []byte) (any, error) {
		entered <- struct{}{}
		<-release
		return &Bulk{Data: []byte("late bytes"), Release: func() { close(written) }}, nil
	})
	c := dialTCP(t, serveTCP(t, s))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dst := make([]byte, 20)
	if _, err := c.CallInto(ctx, "Test.BlockBulk", nil, dst); !errors.Is(err, context.Canceled) || IsTransport(err) {
		t.Fatalf("cancelled: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.CallInto(ctx, "Test.BlockBulk", nil, dst)
		errc <- err
	}()
	<-entered // the request reached the handler: the client is waiting for its answer
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while waiting: %v", err)
	}
	close(release)
	// The late answer is read and dropped, not written to dst. The server
	// wrote it before the echo's answer (Release runs once it is written),
	// so the client has read past it when the echo returns.
	<-written
	checkEcho(t, c, 6)
	if !bytes.Equal(dst, make([]byte, 20)) {
		t.Fatalf("dst written after CallInto returned: %q", dst)
	}
}

// scriptedPeer answers each request read from its end of a pipe with the
// next of replies: raw bytes, the request's seq patched in where a reply
// holds the placeholder seq 0x7f. After the last reply it closes.
func scriptedPeer(t *testing.T, replies ...[]byte) *Client {
	t.Helper()
	cc, sc := net.Pipe()
	go func() {
		defer sc.Close()
		br := bufio.NewReader(sc)
		if _, err := br.Discard(HelloSize); err != nil {
			return
		}
		if _, err := sc.Write(AppendHello(nil, testVersion)); err != nil {
			return
		}
		for _, r := range replies {
			f, err := ReadFrame(br)
			if err != nil {
				return
			}
			// The reply's header starts at byte 4 with fixarray(5), seq.
			out := bytes.Clone(r)
			if len(out) > 5 && out[5] == 0x7f {
				out[5] = byte(f.Seq)
			}
			if _, err := sc.Write(out); err != nil {
				return
			}
		}
	}()
	c, err := NewClient(cc, testVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// response frames a response with seq placeholder 0x7f and the given body
// bytes, with a length prefix that counts extra more bytes than it holds
// (negative: fewer).
func response(body []byte, extra int) []byte {
	payload := append([]byte{0x95, 0x7f, 1, 0xa0, 0xa0, 0xa0}, body...)
	n := len(payload) + extra
	return append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, payload...)
}

func TestCallIntoMalformedBodies(t *testing.T) {
	t.Parallel()
	ok := response([]byte{0xc4, 3, 'a', 'b', 'c'}, 0)
	cases := []struct {
		name  string
		reply []byte
		want  string // in the error; "" for a transport error
	}{
		{"bin longer than its frame", response([]byte{0xc4, 9, 'a', 'b', 'c'}, 0), "bin of 9 bytes in a body with 3 bytes"},
		{"bin shorter than its frame", response([]byte{0xc4, 1, 'a', 'b', 'c'}, 0), "bin of 1 bytes in a body with 3 bytes"},
		{"bin header cut short", response([]byte{0xc6, 0, 0}, 0), "bin header cut short"},
		{"nil", response([]byte{0xc0}, 0), "type 0xc0"},
		{"empty body", response(nil, 0), "empty body"},
		{"huge bin32", response([]byte{0xc6, 0xff, 0xff, 0xff, 0xff, 1}, 0), "bin of 4294967295 bytes"},
		{"truncated frame", response([]byte{0xc4, 200, 'a'}, 199), ""},
		{"truncated bin header", response([]byte{0xc6, 0}, 3), ""},
		// Past the header peek: readBulk itself meets the end.
		{"truncated bin", response(append([]byte{0xc6, 0, 1, 0, 0}, make([]byte, 40000)...), 65536-40000), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			replies := [][]byte{tc.reply, ok}
			if tc.want == "" {
				replies = replies[:1] // then the peer hangs up
			}
			c := scriptedPeer(t, replies...)
			dst := make([]byte, 500)
			_, err := c.CallInto(context.Background(), "Test.Bulk", nil, dst)
			if tc.want == "" {
				if !IsTransport(err) || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("got %v, want a transport error for a truncated frame", err)
				}
				return
			}
			if err == nil || IsTransport(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a local error containing %q", err, tc.want)
			}
			// The frame length kept the stream in step: the next answer reads.
			n, err := c.CallInto(context.Background(), "Test.Bulk", nil, dst)
			if err != nil || string(dst[:n]) != "abc" {
				t.Fatalf("next call: %q, %v", dst[:n], err)
			}
		})
	}
}

func TestCallIntoHeaderLongerThanReadBuffer(t *testing.T) {
	t.Parallel()
	// A response whose header (a 40 KiB error string) does not fit the
	// client's 32 KiB read buffer: the reader falls back to reading the
	// payload whole, and still routes the bin into dst.
	long := strings.Repeat("e", 40<<10)
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	if err := WriteFrame(w, &Frame{Seq: 0x7f, Kind: KindResponse, Error: long, Body: []byte{0xc4, 2, 'h', 'i'}}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	c := scriptedPeer(t, b.Bytes(), response([]byte{0xc4, 1, '!'}, 0))
	dst := make([]byte, 10)
	if n, err := c.CallInto(context.Background(), "Test.Bulk", nil, dst); err != nil || string(dst[:n]) != "hi" {
		t.Fatalf("long header: %q, %v", dst[:n], err)
	}
	if n, err := c.CallInto(context.Background(), "Test.Bulk", nil, dst); err != nil || string(dst[:n]) != "!" {
		t.Fatalf("after the long header: %q, %v", dst[:n], err)
	}
}

func TestReadFrameHeaderLongerThanReadBuffer(t *testing.T) {
	t.Parallel()
	want := &Frame{Seq: 9, Kind: KindError, Error: strings.Repeat("x", 100), Code: "c", Body: []byte{0xc0}}
	r := bufio.NewReaderSize(bytes.NewReader(encodeFrame(t, want)), 16)
	got, err := ReadFrame(r)
	if err != nil || !framesEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	// Malformed beyond the buffer: still an error, not a panic.
	bad := []byte{0, 0, 0, 40, 0x95, 1, 1, 0xd9, 30}
	bad = append(bad, bytes.Repeat([]byte{'m'}, 30)...)
	bad = append(bad, 0xa0, 0xff) // code is not a string
	if _, err := ReadFrame(bufio.NewReaderSize(bytes.NewReader(bad), 16)); !errors.Is(err, ErrMalformedFrame) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("malformed long header: %v", err)
	}
}

func FuzzReadBulk(f *testing.F) {
	f.Add([]byte{0xc4, 3, 'a', 'b', 'c'}, 3)
	f.Add([]byte{0xc5, 0, 2, 1, 2}, 1)
	f.Add([]byte{0xc6, 0, 0, 0, 1, 9}, 8)
	f.Add([]byte{0xc6, 0xff}, 4)
	f.Add([]byte{0x81, 0xa1, 'D', 0xc4, 0}, 10)
	f.Fuzz(func(t *testing.T, body []byte, dstLen int) {
		dstLen = max(0, min(dstLen, 1<<16))
		dst := make([]byte, dstLen)
		for _, rest := range []int{len(body), len(body) + 5, max(0, len(body)-1)} {
			r := bufio.NewReaderSize(bytes.NewReader(body), 16)
			n, bad, connErr := readBulk(r, rest, dst)
			switch {
			case connErr != nil:
				if rest <= len(body) {
					t.Fatalf("read error %v with the whole body there", connErr)
				}
			case bad != nil:
				if !errors.Is(bad, errBulkBody) {
					t.Fatalf("bad body error %v does not wrap errBulkBody", bad)
				}
				if got := consumed(r, body); rest <= len(body) && got != rest {
					t.Fatalf("skipped %d bytes of a %d-byte body", got, rest)
				}
			default:
				if n > dstLen || rest <= len(body) && !bytes.Equal(dst[:n], body[rest-n:rest]) {
					t.Fatalf("n=%d for a %d-byte buffer, body %x", n, dstLen, body)
				}
			}
		}
	})
}

// consumed is how many bytes of body r has handed out.
func consumed(r *bufio.Reader, body []byte) int {
	rest, _ := io.ReadAll(r)
	return len(body) - len(rest)
}
