package objstore

import "fmt"

// WriteAt copies data into created, unsealed object id from byte off, for
// a producer that cannot map the arena (a driver on another machine sends
// the bytes to the node: Obj.Write). It copies under the store's lock, so
// keep chunks modest (a few MiB), as for ReadAt. Errors: ErrNotFound
// (absent), ErrSealed (an object must not be written after Seal),
// ErrInvalid (off < 0 or off+len(data) past its size), ErrClosed.
func (s *Store) WriteAt(id string, data []byte, off int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup("write", id)
	if err != nil {
		return err
	}
	if o.sealed {
		return fmt.Errorf("write object %s: %w", id, ErrSealed)
	}
	if off < 0 || off > o.size || int64(len(data)) > o.size-off {
		return fmt.Errorf("write object %s (%d bytes): %d bytes at offset %d: %w", id, o.size, len(data), off, ErrInvalid)
	}
	copy(s.data[o.off+off:o.off+o.size], data)
	return nil
}
