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
// on this machine by this user, or "" when none is recorded.
func CurrentAddress() string {
	b, err := os.ReadFile(CurrentAddressFile())
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\n\r ")
}
