package formats

// Verify checks a bundle and returns every problem found; nil means sound.
func Verify(dir string) []error { return []error{errNotImplemented} }

// RepairReport says what Repair recovered.
type RepairReport struct {
	// Tables maps a table file name to the rows recovered.
	Tables map[string]uint64
	// Notes describe each action taken.
	Notes []string
}

// Repair recovers a bundle whose writer was killed, up to the last flushed batch.
func Repair(dir string) (*RepairReport, error) { return nil, errNotImplemented }
