package objstore

import "golang.org/x/sys/unix"

// populateWrite maps b's pages (a page-aligned range of a shared mapping)
// writable without writing them. The errors it may return (EINVAL before
// Linux 5.14, ENOMEM, EFAULT) leave the pages to fault in as usual.
func populateWrite(b []byte) {
	_ = unix.Madvise(b, unix.MADV_POPULATE_WRITE)
}

// populateWriteErr is populateWrite reporting its error, so a caller can
// fall back to touching the pages.
func populateWriteErr(b []byte) error {
	return unix.Madvise(b, unix.MADV_POPULATE_WRITE)
}

// freeMemory is the system's free RAM in bytes (sysinfo's freeram), or -1
// where it is unknown.
func freeMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return -1
	}
	return int64(si.Freeram) * int64(si.Unit)
}
