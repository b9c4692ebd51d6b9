package formats

import "github.com/apache/arrow-go/v18/arrow"

// Bundle is an open trace bundle.
type Bundle struct {
	dir string
	man Manifest
}

// Open opens the bundle in dir and reads its manifest.
func Open(dir string) (*Bundle, error) { return nil, errNotImplemented }

// Dir returns the bundle directory.
func (b *Bundle) Dir() string { return b.dir }

// Manifest returns the bundle's manifest.
func (b *Bundle) Manifest() *Manifest { return &b.man }

// Files returns all rows of files.arrow.
func (b *Bundle) Files() ([]File, error) { return nil, errNotImplemented }

// Accesses returns a cursor over accesses.arrow.
func (b *Bundle) Accesses() (*AccessCursor, error) { return nil, errNotImplemented }

// Hints returns a cursor over hints.arrow; without hints.arrow it is empty.
func (b *Bundle) Hints() (*HintCursor, error) { return nil, errNotImplemented }

// OpenTable opens one table file (FilesFile, AccessesFile or HintsFile) for
// raw Arrow access.
func (b *Bundle) OpenTable(name string) (*Table, error) { return nil, errNotImplemented }

// Close releases the bundle.
func (b *Bundle) Close() error { return nil }

// AccessCursor iterates over accesses.arrow rows.
type AccessCursor struct {
	cur Access
	err error
}

// Next advances to the next row.
func (c *AccessCursor) Next() bool { return false }

// At returns the current row, valid until the next call to Next.
func (c *AccessCursor) At() *Access { return &c.cur }

// Err returns the first error met.
func (c *AccessCursor) Err() error { return c.err }

// Close releases the cursor.
func (c *AccessCursor) Close() error { return nil }

// HintCursor iterates over hints.arrow rows.
type HintCursor struct {
	cur Hint
	err error
}

// Next advances to the next row.
func (c *HintCursor) Next() bool { return false }

// At returns the current row, valid until the next call to Next (Children is reused).
func (c *HintCursor) At() *Hint { return &c.cur }

// Err returns the first error met.
func (c *HintCursor) Err() error { return c.err }

// Close releases the cursor.
func (c *HintCursor) Close() error { return nil }

// Table gives raw Arrow access to one table file.
type Table struct {
	schema *arrow.Schema
}

// Schema returns the table schema.
func (t *Table) Schema() *arrow.Schema { return t.schema }

// NumBatches returns the number of record batches.
func (t *Table) NumBatches() int { return 0 }

// Batch returns record batch i; the caller must Release it.
func (t *Table) Batch(i int) (arrow.RecordBatch, error) { return nil, errNotImplemented }

// Close releases the table.
func (t *Table) Close() error { return nil }
