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
