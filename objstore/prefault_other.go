//go:build !linux

package objstore

// populateWrite does nothing where MADV_POPULATE_WRITE does not exist: the
// pages fault in as they are first written.
func populateWrite(b []byte) {}
