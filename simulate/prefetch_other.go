//go:build !amd64

package simulate

import "unsafe"

// prefetch does nothing where no prefetch instruction is wired up.
func prefetch(unsafe.Pointer) {}
