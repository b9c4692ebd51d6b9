package record

import "github.com/predictio/predictio/source"

// bundleSink is the source's consumer: it appends every batch to the
// bundle. It allocates nothing per row (formats.Writer copies into its
// column buffers).
type bundleSink struct {
	w bundleWriter
}

// Consume writes b's accesses and hints. The files table is written at the
// end, from the source's final view of every file.
func (s *bundleSink) Consume(b *source.Batch) error {
	// formats' errors name the action and the table.
	for i := range b.Accesses {
		if err := s.w.Append(&b.Accesses[i]); err != nil {
			return err
		}
	}
	for i := range b.Hints {
		if err := s.w.AppendHint(&b.Hints[i]); err != nil {
			return err
		}
	}
	return nil
}
