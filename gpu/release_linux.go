package gpu

import (
	"os"
	"syscall"
	"unsafe"
)

// releaseImage drops the whole pages inside b from this process's resident
// memory (MADV_DONTNEED). b must lie in a read-only file mapping (the
// executable's read-only data): those pages are clean, so dropping them
// loses nothing and the next read maps them again from the file. Partial
// pages at either end are kept, as other data shares them.
func releaseImage(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(&b[0]))
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + uintptr(len(b))) &^ (page - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-start:hi-start], syscall.MADV_DONTNEED)
}
