package testutil

import (
	"fmt"
	"os"
	"testing"
)

// TestFreePortAvoidsEphemeralRange: ports come from outside the kernel's
// ephemeral range, where an outgoing connection could take one before the
// node binds it, and are never handed out twice.
func TestFreePortAvoidsEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no ephemeral port range to check against: %v", err)
	}
	var first, last int
	if n, _ := fmt.Sscan(string(b), &first, &last); n != 2 {
		t.Fatalf("ip_local_port_range %q", b)
	}
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p >= first && p <= last {
			t.Fatalf("port %d is in the ephemeral range %d-%d", p, first, last)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
