package wire

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// The hand-written job ID check accepts exactly what its pattern does.
func TestJobIDCheckMatchesItsPattern(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	cases := []string{"", "a", "A1", "_a", ".a", "-a", "a_b.c-d", "a/b", "a b", "..", "é", strings.Repeat("x", 64), strings.Repeat("x", 65), "job\x00", "ok.."}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "aZ09_.-/ \x00é"
	for range 5000 {
		b := make([]byte, rng.IntN(70))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, id := range cases {
		if got, want := CheckJobID(id) == nil, re.MatchString(id); got != want {
			t.Fatalf("CheckJobID(%q) accepts: %v, the pattern: %v", id, got, want)
		}
	}
}
