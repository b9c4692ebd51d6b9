package simulate

import "unsafe"

// prefetch asks the CPU to bring the cache line at p into its caches
// without waiting for it (PREFETCHT0): lanes issue it for memory an event a
// few events ahead will touch, so that the misses of several events
// overlap.
//
//go:noescape
func prefetch(p unsafe.Pointer)

// prefetch3 is prefetch of three lines in one call.
//
//go:noescape
func prefetch3(a, b, c unsafe.Pointer)
