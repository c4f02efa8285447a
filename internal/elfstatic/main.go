// Command elfstatic exits 0 when every file named on its command line is a
// statically linked ELF executable (no program interpreter, no shared
// libraries needed), and 1 naming the first that is not. `make build` runs
// it on bin/nodeup, so the check needs only Go (not the file command).
package main

import (
	"debug/elf"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: elfstatic FILE...")
		os.Exit(2)
	}
	for _, path := range os.Args[1:] {
		if err := checkStatic(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// checkStatic returns nil when path is an ELF file with neither a PT_INTERP
// program header nor DT_NEEDED entries, and an error naming path and the
// reason otherwise.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not statically linked: not a readable ELF file: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is not statically linked: it names a program interpreter (build with CGO_ENABLED=0)", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: read its dynamic section: %w", path, err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s is not statically linked: it needs %v (build with CGO_ENABLED=0)", path, libs)
	}
	return nil
}
