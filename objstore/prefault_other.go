//go:build !linux

package objstore

import "errors"

// populateWrite does nothing where MADV_POPULATE_WRITE does not exist: the
// pages fault in as they are first written.
func populateWrite(b []byte) {}

// populateWriteErr reports that populating is not supported here.
func populateWriteErr(b []byte) error { return errors.New("MADV_POPULATE_WRITE is Linux only") }

// freeMemory is unknown here.
func freeMemory() int64 { return -1 }
