package formats

// WriterOption configures a Writer.
type WriterOption func(*writerConfig)

type writerConfig struct {
	batchRows int
}

// WithBatchRows sets the number of rows per record batch (default 65536).
// Batches are never smaller except the last one and those written by Flush.
func WithBatchRows(n int) WriterOption {
	return func(c *writerConfig) {
		if n > 0 {
			c.batchRows = n
		}
	}
}

// Writer streams rows into a new bundle directory.
type Writer struct {
	dir string
	cfg writerConfig
	man Manifest
}

// Create starts a bundle in dir, which must not exist or be empty.
func Create(dir string, opts ...WriterOption) (*Writer, error) {
	return nil, errNotImplemented
}

// Manifest returns the manifest Close will write. Callers fill Host,
// Recording, Start, End and Counters before Close.
func (w *Writer) Manifest() *Manifest { return &w.man }

// AddFile adds a row to files.arrow. File ids must be unique.
func (w *Writer) AddFile(f File) error { return errNotImplemented }

// Append adds a row to accesses.arrow.
func (w *Writer) Append(a *Access) error { return errNotImplemented }

// AppendHint adds a row to hints.arrow.
func (w *Writer) AppendHint(h *Hint) error { return errNotImplemented }

// Flush writes partial batches to disk now.
func (w *Writer) Flush() error { return errNotImplemented }

// Close finalizes the bundle.
func (w *Writer) Close() error { return errNotImplemented }

// Abort stops without finalizing.
func (w *Writer) Abort() error { return errNotImplemented }
