package wire

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// InlineMax is the largest value, in bytes of msgpack, that travels inside
// messages (DESIGN: ≤ 100 KiB inline; larger values live in the object
// store). A node sends its own in JobRegisterReply.InlineMax.
const InlineMax = 100 << 10

// CurrentAddressFile is where a node started on this machine records its
// RPC address ($TMPDIR/nodeup-<uid>/current), so that client verbs and
// drivers find the most recently started node, as Ray's
// /tmp/ray/ray_current_cluster does.
func CurrentAddressFile() string {
	return filepath.Join(os.TempDir(), "nodeup-"+strconv.Itoa(os.Getuid()), "current")
}

// CurrentAddress returns the RPC address of the node most recently started
// on this machine by this user (the file's first line), or "" when none is
// recorded.
func CurrentAddress() string {
	addr, _ := currentLines()
	return addr
}

// CurrentSocket returns the Unix socket of the node most recently started
// on this machine by this user, as an address ("unix:///path", the file's
// second line), or "" when it has none. Local clients prefer it to
// CurrentAddress: the node trusts them by their credentials, and it is
// faster than loopback TCP.
func CurrentSocket() string {
	_, sock := currentLines()
	return sock
}

func currentLines() (addr, sock string) {
	b, err := os.ReadFile(CurrentAddressFile())
	if err != nil {
		return "", ""
	}
	addr, sock, _ = strings.Cut(strings.TrimRight(string(b), "\n\r "), "\n")
	return strings.TrimSpace(addr), strings.TrimSpace(sock)
}

// LocalNodesDir is where every node started on this machine by this user
// records its RPC address and Unix socket, one file each
// ($TMPDIR/nodeup-<uid>/nodes/<address>): CurrentAddressFile names only
// the most recently started, and a machine may run several.
func LocalNodesDir() string {
	return filepath.Join(os.TempDir(), "nodeup-"+strconv.Itoa(os.Getuid()), "nodes")
}

// LocalNodeFile is the file LocalNodesDir holds for the node whose RPC
// address is addr: the address with every byte outside [A-Za-z0-9.-]
// written as '_' (host:port, [v6]:port).
func LocalNodeFile(addr string) string {
	b := []byte(addr)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	return filepath.Join(LocalNodesDir(), string(b))
}

// LocalSocketFor returns the Unix socket ("unix:///path") of the node
// running on this machine, for this user, whose RPC address is addr, or ""
// when none is recorded or its socket is gone. A client given a local
// node's host:port without a token reaches it there: the node trusts this
// user on its socket, while its TCP port wants TLS and a token.
func LocalSocketFor(addr string) string {
	b, err := os.ReadFile(LocalNodeFile(addr))
	if err != nil {
		return ""
	}
	got, sock, _ := strings.Cut(strings.TrimRight(string(b), "\n\r "), "\n")
	sock = strings.TrimSpace(sock)
	path, ok := strings.CutPrefix(sock, "unix://")
	if strings.TrimSpace(got) != addr || !ok {
		return ""
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return ""
	}
	return sock
}

// LocalSocket returns the Unix socket of this machine's node at addr: the
// current node's (CurrentSocket) when addr is CurrentAddress, else the one
// LocalSocketFor records; "" when addr names no node of this user here.
func LocalSocket(addr string) string {
	if addr == "" {
		return ""
	}
	if addr == CurrentAddress() && CurrentSocket() != "" {
		return CurrentSocket()
	}
	return LocalSocketFor(addr)
}
