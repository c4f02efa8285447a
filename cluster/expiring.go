package cluster

import "time"

// expiringSet remembers keys for at least ttl and at most max of them,
// forgetting the oldest first. Keys are forgotten only when one is added
// (has does not look at the time), so a key may outlive ttl while no key
// is added. Not safe for concurrent use: its owner locks.
type expiringSet struct {
	ttl time.Duration
	max int
	at  map[string]time.Time
	// order holds the additions oldest first; a key added again appears
	// again, and its older entry is skipped when it reaches the front.
	order []expiringKey
}

type expiringKey struct {
	key string
	at  time.Time
}

func newExpiringSet(ttl time.Duration, max int) *expiringSet {
	return &expiringSet{ttl: ttl, max: max, at: map[string]time.Time{}}
}

// add remembers key from now on, first forgetting what expired by now.
func (s *expiringSet) add(key string, now time.Time) {
	s.at[key] = now
	s.order = append(s.order, expiringKey{key, now})
	for len(s.order) > 0 {
		front := s.order[0]
		cur, live := s.at[front.key]
		stale := !live || !cur.Equal(front.at)
		if !stale && now.Sub(front.at) <= s.ttl && len(s.at) <= s.max && len(s.order) <= 2*s.max {
			return
		}
		if !stale {
			delete(s.at, front.key)
		}
		s.order = s.order[1:]
	}
}

// has reports whether key is remembered.
func (s *expiringSet) has(key string) bool {
	_, ok := s.at[key]
	return ok
}
