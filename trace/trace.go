// Package trace implements the predictio trace subcommands: inspecting,
// verifying, printing, exporting, importing, anonymizing, merging, slicing,
// repairing and synthesizing trace bundles (see package formats).
//
// Every function streams rows through the formats cursors, so memory stays
// bounded by the batch size, not by the number of events in a bundle.
package trace

import (
	"errors"
	"fmt"
	"os"

	"github.com/predictio/predictio/formats"
)

// ToolVersion is recorded as tool_version in the manifests this package
// writes; the predictio command sets it to its version.
var ToolVersion = "dev"

// ErrUsage marks an error caused by a bad option value rather than by the
// data; the command exits 2 for it.
var ErrUsage = errors.New("usage")

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// KindName returns the documented name of an access kind (see
// formats.AccessKind.String), or "kindN" for a value this version does not
// know.
func KindName(k formats.AccessKind) string { return k.String() }

// HintKindName returns the documented name of a hint kind, or "hintN".
func HintKindName(k formats.HintKind) string { return k.String() }

// hasTable reports whether the bundle directory holds the named table file.
func hasTable(dir, name string) bool {
	_, err := os.Stat(dir + string(os.PathSeparator) + name)
	return err == nil
}

// forEachAccess streams every access row of b to fn. Its errors are
// formats' own, which name the table file and the batch.
func forEachAccess(b *formats.Bundle, fn func(a *formats.Access) error) error {
	c, err := b.Accesses()
	if err != nil {
		return err
	}
	defer c.Close()
	for c.Next() {
		if err := fn(c.At()); err != nil {
			return err
		}
	}
	return c.Err()
}

// forEachHint streams every hint row of b to fn, with formats' errors.
func forEachHint(b *formats.Bundle, fn func(h *formats.Hint) error) error {
	c, err := b.Hints()
	if err != nil {
		return err
	}
	defer c.Close()
	for c.Next() {
		if err := fn(c.At()); err != nil {
			return err
		}
	}
	return c.Err()
}

// openBundle opens the bundle in dir.
func openBundle(dir string, opts []formats.OpenOption) (*formats.Bundle, error) {
	// formats.Open errors already say "open bundle" and name the file.
	return formats.Open(dir, opts...)
}
