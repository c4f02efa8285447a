package objstore

// Hold is Get for a reader that maps the object itself (a worker on the
// node): it returns where the sealed object lies and pins it in the same
// critical section, so nothing spills it between the answer and the read.
// The reader releases it with Unpin. ok is false if id is absent or
// unsealed, or the store is closed.
func (s *Store) Hold(id string) (loc Location, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[id]
	if s.data == nil || o == nil || !o.sealed {
		return Location{}, false
	}
	s.touch(o)
	o.pins++
	return Location{o.off, o.size}, true
}

// SpillCandidates returns sealed primary copies that no reader pins and no
// View holds, of at least 1 byte, largest first, until their allocations
// add up to at least need bytes (or all of them, if they do not): what a
// node may spill to disk (Ray spills primary copies not in use). Secondary
// copies are left to eviction.
func (s *Store) SpillCandidates(need int64) []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*object
	for _, o := range s.objects {
		if o.sealed && !o.secondary && o.pins == 0 && o.views == 0 && o.size > 0 {
			all = append(all, o)
		}
	}
	sortLargestFirst(all)
	var out []Entry
	var got int64
	for _, o := range all {
		if got >= need {
			break
		}
		out = append(out, Entry{ID: o.id, Size: o.size, Sealed: true, Owner: o.owner, CallSite: o.callSite})
		got += alignUp(o.size)
	}
	return out
}

// DeleteUnpinned deletes id (as Delete) only if no reader pins it, and
// reports whether it did: the last step of spilling, after the bytes are
// on disk, so a reader that pinned the object meanwhile keeps it.
func (s *Store) DeleteUnpinned(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[id]
	if s.data == nil || o == nil || o.pins > 0 {
		return false
	}
	s.remove(o)
	return true
}
