package formats

// SynthSpec describes a synthetic bundle.
type SynthSpec struct {
	Pattern   string // "seq", "stride", "random", "sparse", "btree"
	Events    int
	Files     int
	FilePages uint64
	Stride    uint64
	Run       int
	Seed      int64
	ThinkNS   uint64
}

// Synth writes a deterministic synthetic bundle into dir.
func Synth(dir string, spec SynthSpec) error { return errNotImplemented }
