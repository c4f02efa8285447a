package gpu

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// releaseImage drops the whole pages inside b from this process's resident
// memory (MADV_DONTNEED) when b lies in one read-only file mapping, as the
// executable's read-only data does: those pages are clean copies of the
// file, so dropping them loses nothing and the next read maps them again
// from it. Anywhere else (heap, anonymous or writable memory, an executable
// unpacked into anonymous memory) dropping pages would zero or lose them,
// so b is left alone. Partial pages at either end are kept, as other data
// shares them.
func releaseImage(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(&b[0]))
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + uintptr(len(b))) &^ (page - 1)
	if hi <= lo || !readOnlyFileMapping(lo, hi) {
		return
	}
	_ = syscall.Madvise(b[lo-start:hi-start], syscall.MADV_DONTNEED)
}

// readOnlyFileMapping reports whether [lo, hi) lies in one mapping of this
// process that is backed by a file (an inode) and not writable, per
// /proc/self/maps.
func readOnlyFileMapping(lo, hi uintptr) bool {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		from, to, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(from, 16, 64)
		e, err2 := strconv.ParseUint(to, 16, 64)
		if err1 != nil || err2 != nil || uintptr(s) > lo || uintptr(e) <= lo {
			continue
		}
		perms, inode := fields[1], fields[4]
		return uintptr(e) >= hi && len(perms) >= 2 && perms[0] == 'r' && perms[1] == '-' && inode != "0"
	}
	return false
}
