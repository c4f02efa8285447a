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
// answers with its own hello. A client that presents a token (a credential
// its server's Authenticator resolves, see Auth) sends "NT" instead of "NU",
// then the token's length (uint16, big-endian, at most MaxTokenSize) and
// its bytes; the server's hello is always "NU". Each side compares the other's version with
// its own and refuses a different one: the server answers its hello and
// closes (logging both versions), the client fails every call on the
// connection with a *VersionError. The check costs nothing per call.
const HelloSize = 4

// helloMagic starts a hello. As the length prefix of a frame from a peer
// without the hello, 'N' (0x4e) makes it larger than MaxFrameSize, so such
// a peer closes the connection instead of misreading it.
var helloMagic = [2]byte{'N', 'U'}

// helloTokenMagic starts a client's hello that carries a token.
var helloTokenMagic = [2]byte{'N', 'T'}

// MaxTokenSize bounds the token a client may present in its hello, in
// bytes; a longer one closes the connection. nodeup's tokens are 114 bytes.
const MaxTokenSize = 1024

// AppendHelloToken appends a client's hello of protocol version carrying
// token (an empty token gives AppendHello's bytes). It panics on a token
// longer than MaxTokenSize, a programming error (Pool and Dial check it).
func AppendHelloToken(b []byte, version uint16, token string) []byte {
	if token == "" {
		return AppendHello(b, version)
	}
	if len(token) > MaxTokenSize {
		panic(fmt.Sprintf("rpc: token of %d bytes exceeds MaxTokenSize %d", len(token), MaxTokenSize))
	}
	b = binary.BigEndian.AppendUint16(append(b, helloTokenMagic[:]...), version)
	b = binary.BigEndian.AppendUint16(b, uint16(len(token)))
	return append(b, token...)
}

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
	_, err := readHelloToken(br, peer, local, false)
	return err
}

// readHelloToken is readHello that, when withToken is set (the server's
// side), also accepts a client's hello carrying a token and returns the
// token ("" for none). A token longer than MaxTokenSize is an error
// wrapping ErrMalformedFrame; it is read only after the version matched.
func readHelloToken(br *bufio.Reader, peer string, local uint16, withToken bool) (string, error) {
	var h [HelloSize]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return "", fmt.Errorf("read protocol hello: %w", unexpectedEOF(err))
	}
	token := withToken && h[0] == helloTokenMagic[0] && h[1] == helloTokenMagic[1]
	if !token && (h[0] != helloMagic[0] || h[1] != helloMagic[1]) {
		return "", &VersionError{Peer: peer, Local: local, NoHello: true}
	}
	if v := binary.BigEndian.Uint16(h[2:]); v != local {
		return "", &VersionError{Peer: peer, Local: local, Remote: v}
	}
	if !token {
		return "", nil
	}
	var n [2]byte
	if _, err := io.ReadFull(br, n[:]); err != nil {
		return "", fmt.Errorf("read hello token length: %w", unexpectedEOF(err))
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if size == 0 || size > MaxTokenSize {
		return "", fmt.Errorf("%w: hello token of %d bytes (want 1 to %d)", ErrMalformedFrame, size, MaxTokenSize)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(br, b); err != nil {
		return "", fmt.Errorf("read hello token: %w", unexpectedEOF(err))
	}
	return string(b), nil
}

// hello runs the server's side: read the client's hello within
// Limits.FrameTimeout, then answer ours, also to a client of another
// version, so that it can name both versions before the connection closes.
func (sc *serverConn) hello(br *bufio.Reader) (token string, err error) {
	_ = sc.conn.SetReadDeadline(time.Now().Add(sc.limits.FrameTimeout))
	token, err = readHelloToken(br, sc.remote, sc.s.version, true)
	var ve *VersionError
	if err != nil && !errors.As(err, &ve) {
		return "", err
	}
	_ = sc.conn.SetWriteDeadline(time.Now().Add(sc.limits.FrameTimeout))
	if _, werr := sc.conn.Write(AppendHello(nil, sc.s.version)); werr != nil && err == nil {
		err = fmt.Errorf("write protocol hello: %w", werr)
	}
	_ = sc.conn.SetWriteDeadline(time.Time{})
	return token, err
}
