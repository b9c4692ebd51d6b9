package formats

import "errors"

// Sentinel errors. Errors returned by this package wrap them, so callers test
// with errors.Is.
var (
	// ErrVersion means a bundle's major format version is not supported.
	ErrVersion = errors.New("unsupported bundle format version")
	// ErrCorrupt means a bundle file is truncated, malformed or fails a check.
	ErrCorrupt = errors.New("corrupt bundle")
)
