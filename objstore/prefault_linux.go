package objstore

import "golang.org/x/sys/unix"

// populateWrite maps b's pages (a page-aligned range of a shared mapping)
// writable without writing them. The errors it may return (EINVAL before
// Linux 5.14, ENOMEM, EFAULT) leave the pages to fault in as usual.
func populateWrite(b []byte) {
	_ = unix.Madvise(b, unix.MADV_POPULATE_WRITE)
}
