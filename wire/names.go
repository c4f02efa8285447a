package wire

import (
	"fmt"

	"github.com/nodeup/nodeup/internal/pki"
)

// HashLen is the length of a binary hash: hex sha256, lowercase.
const HashLen = 64

// CheckHash returns nil when h is a binary hash (exactly HashLen lowercase
// hex characters), else an error naming field and h. A hash names a file
// in a node's binary cache, so anything else (a path, "../..", an empty
// string) is refused wherever one arrives.
func CheckHash(field, h string) error {
	if IsLowerHex(h, HashLen) {
		return nil
	}
	if len(h) != HashLen {
		return fmt.Errorf("%s %q: not a sha256 hash: want %d lowercase hex characters, got %d characters", field, clip(h), HashLen, len(h))
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%s %q: not a sha256 hash: character %d is %q, want 0-9 or a-f", field, clip(h), i, c)
		}
	}
	return nil
}

// IsLowerHex reports whether s is exactly n lowercase hex characters
// (pki.IsLowerHex), for packages that may not import internal/pki.
func IsLowerHex(s string, n int) bool { return pki.IsLowerHex(s, n) }

// IsHexID reports whether s has the shape of a node, actor or placement
// group ID: 8 to 64 lowercase hex characters.
func IsHexID(s string) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	return IsLowerHex(s, len(s))
}

// MaxIDLen is the longest job or actor ID a node accepts, in bytes.
const MaxIDLen = 128

// CheckID returns nil when id can name a job or an actor: 1 to MaxIDLen
// characters of letters, digits, '-', '_' and '.', and not "." or "..".
// IDs become parts of file names on nodes (worker logs), so a peer's ID
// must never carry a path.
func CheckID(field, id string) error {
	if id == "" || len(id) > MaxIDLen || id == "." || id == ".." {
		return fmt.Errorf("%s %q: want 1 to %d characters of letters, digits, '-', '_' and '.'", field, clip(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%s %q: character %d is %q; want letters, digits, '-', '_' and '.'", field, clip(id), i, c)
		}
	}
	return nil
}

// clip shortens a hostile value for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
