package simulate

import "unsafe"

// prefetch3 asks the CPU to bring the cache lines at a, b and c into its
// caches without waiting for them (PREFETCHT0): lanes issue it for memory
// an event a few events ahead will touch, so that the misses of several
// events overlap. One call serves several lines, since a call to assembly
// makes the Go code around it keep its values in memory.
//
//go:noescape
func prefetch3(a, b, c unsafe.Pointer)

// prefetch8 is prefetch3 of eight lines.
//
//go:noescape
func prefetch8(p0, p1, p2, p3, p4, p5, p6, p7 unsafe.Pointer)
