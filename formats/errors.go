package formats

import "errors"

// Sentinel errors. Errors returned by this package wrap them, so callers test
// with errors.Is.
var (
	// ErrVersion means a bundle's major format version is not supported.
	ErrVersion = errors.New("unsupported bundle format version")
	// ErrCorrupt means a bundle file is truncated, malformed or fails a check.
	ErrCorrupt = errors.New("corrupt bundle")
	// ErrIncomplete means a bundle's writer did not finish (it was killed,
	// or the machine lost power): a table lacks its footer, or only
	// manifest.partial.json exists. 'predictio trace repair' recovers it.
	ErrIncomplete = errors.New("incomplete bundle")
	// ErrMissingFiles means accesses or hints reference file ids that
	// files.arrow lacks (see Bundle.CheckReferences).
	ErrMissingFiles = errors.New("rows reference missing files")
)
