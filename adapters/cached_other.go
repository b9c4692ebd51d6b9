//go:build !linux

package adapters

// Cached returns ErrNotSupported: cachestat is a Linux system call.
func (c OSContent) Cached(off, n int64) (bool, error) { return false, ErrNotSupported }
