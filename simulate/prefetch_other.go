//go:build !amd64

package simulate

import "unsafe"

// prefetch3 does nothing where no prefetch instruction is wired up.
func prefetch3(a, b, c unsafe.Pointer) {}

// prefetch8 does nothing where no prefetch instruction is wired up.
func prefetch8(p0, p1, p2, p3, p4, p5, p6, p7 unsafe.Pointer) {}
