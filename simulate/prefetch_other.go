//go:build !amd64

package simulate

import "unsafe"

// prefetch does nothing where no prefetch instruction is wired up.
func prefetch(unsafe.Pointer) {}

// prefetch3 does nothing where no prefetch instruction is wired up.
func prefetch3(a, b, c unsafe.Pointer) {}
