package rpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// The hello opens every connection, once, before any frame: the client
// sends HelloSize bytes, "NU" and its protocol version (uint16, big-endian),
// right after any preamble and without waiting; the server reads them and
// answers with its own hello. Each side compares the other's version with
// its own and refuses a different one: the server answers its hello and
// closes (logging both versions), the client fails every call on the
// connection with a *VersionError. The check costs nothing per call.
const HelloSize = 4

// helloMagic starts a hello. As the length prefix of a frame from a peer
// without the hello, 'N' (0x4e) makes it larger than MaxFrameSize, so such
// a peer closes the connection instead of misreading it.
var helloMagic = [2]byte{'N', 'U'}

// AppendHello appends the hello of protocol version to b (for fake peers
// in tests and for clients that build their first write themselves).
func AppendHello(b []byte, version uint16) []byte {
	return binary.BigEndian.AppendUint16(append(b, helloMagic[:]...), version)
}

// VersionError says a peer speaks another protocol version, or none (it
// sent no hello: not a nodeup process, or one from before the hello).
type VersionError struct {
	Peer   string // the peer's address
	Local  uint16 // this process's protocol version
	Remote uint16 // the peer's; 0 with NoHello
	// NoHello: the peer did not send a hello at all.
	NoHello bool
}

// Error names both versions and what to do.
func (e *VersionError) Error() string {
	if e.NoHello {
		return fmt.Sprintf("peer %s sent no protocol hello (this process speaks nodeup protocol version %d): "+
			"it is not a nodeup process, or runs a nodeup older than protocol version 2; run the same nodeup version on both sides",
			e.Peer, e.Local)
	}
	return fmt.Sprintf("peer %s speaks nodeup protocol version %d, this process speaks version %d: run the same nodeup version on both sides",
		e.Peer, e.Remote, e.Local)
}

// readHello reads the peer's hello from br and checks its version against
// local. It returns a *VersionError for a missing or different one, or the
// read error (io.EOF when the peer closed first).
func readHello(br *bufio.Reader, peer string, local uint16) error {
	var h [HelloSize]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return fmt.Errorf("read protocol hello: %w", unexpectedEOF(err))
	}
	if h[0] != helloMagic[0] || h[1] != helloMagic[1] {
		return &VersionError{Peer: peer, Local: local, NoHello: true}
	}
	if v := binary.BigEndian.Uint16(h[2:]); v != local {
		return &VersionError{Peer: peer, Local: local, Remote: v}
	}
	return nil
}

// hello runs the server's side: read the client's hello within
// Limits.FrameTimeout, then answer ours, also to a client of another
// version, so that it can name both versions before the connection closes.
func (sc *serverConn) hello(br *bufio.Reader) error {
	_ = sc.conn.SetReadDeadline(time.Now().Add(sc.limits.FrameTimeout))
	err := readHello(br, sc.remote, sc.s.version)
	var ve *VersionError
	if err != nil && !errors.As(err, &ve) {
		return err
	}
	_ = sc.conn.SetWriteDeadline(time.Now().Add(sc.limits.FrameTimeout))
	if _, werr := sc.conn.Write(AppendHello(nil, sc.s.version)); werr != nil && err == nil {
		err = fmt.Errorf("write protocol hello: %w", werr)
	}
	_ = sc.conn.SetWriteDeadline(time.Time{})
	return err
}
