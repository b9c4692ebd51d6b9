package simulate

import "unsafe"

// prefetch asks the CPU to bring the cache line at p into its caches
// without waiting for it (PREFETCHT0): the lanes issue it for the page
// table slot of an event a few events ahead, so that the memory accesses
// of several events overlap.
//
//go:noescape
func prefetch(p unsafe.Pointer)
