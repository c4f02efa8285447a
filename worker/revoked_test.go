package worker

import "testing"

// A worker remembers at most maxRevoked revoked leases, the latest.
func TestRevokedLeasesBounded(t *testing.T) {
	ls := &leaseSlots{slots: map[uint64]*leaseSlot{}, revoked: map[uint64]string{}}
	const n = 3 * maxRevoked
	for id := uint64(1); id <= n; id++ {
		ls.revoke([]uint64{id}, "bundle returned")
	}
	if len(ls.revoked) != maxRevoked || len(ls.revokedOrder) != maxRevoked {
		t.Fatalf("%d revoked remembered (%d in order), want %d", len(ls.revoked), len(ls.revokedOrder), maxRevoked)
	}
	if ls.whyRevoked(n) == "" || ls.whyRevoked(1) != "" {
		t.Fatalf("the newest must be remembered and the oldest forgotten")
	}
}
