package record

import "github.com/predictio/predictio/source"

// bundleSink is the source's consumer: it appends every batch to the
// bundle. It allocates nothing per row (formats.Writer copies into its
// column buffers).
type bundleSink struct {
	w     bundleWriter
	adapt *adapterStage // nil: no adapters
}

// Consume writes b's accesses and hints, and the hints the adapters derive
// from each access right after it. The files table is written at the
// end, from the source's final view of every file.
func (s *bundleSink) Consume(b *source.Batch) error {
	// formats' errors name the action and the table.
	for i := range b.Accesses {
		if err := s.w.Append(&b.Accesses[i]); err != nil {
			return err
		}
		if s.adapt != nil {
			if err := s.adapt.access(&b.Accesses[i]); err != nil {
				return err
			}
		}
	}
	for i := range b.Hints {
		if err := s.w.AppendHint(&b.Hints[i]); err != nil {
			return err
		}
	}
	return nil
}
