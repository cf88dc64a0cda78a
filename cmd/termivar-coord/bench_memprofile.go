package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// writeMemProfile writes the process's allocation profile to path (bench
// --memprofile): alloc_space attributes every byte allocated during the
// run to its call site, e.g. each copy of a large result (docs/benchmarks.md,
// issue 15). Failures are reported, not fatal: the run's figures stand.
func writeMemProfile(path string) {
	runtime.GC() // NB: settle the in-use figures; alloc_space is complete anyway
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord bench: memprofile:", err)
	}
}
