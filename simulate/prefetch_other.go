//go:build !amd64

package simulate

import "unsafe"

// prefetch does nothing where no prefetch instruction is wired up.
func prefetch(unsafe.Pointer) {}

// prefetch3 does nothing where no prefetch instruction is wired up.
func prefetch3(a, b, c unsafe.Pointer) {}

// prefetch6 does nothing where no prefetch instruction is wired up.
func prefetch6(a, b, c, d, e, f unsafe.Pointer) {}
