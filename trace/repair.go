package trace

import (
	"slices"
	"strings"

	"github.com/predictio/predictio/formats"
)

// Verify checks the bundle in dir (checksums, schemas, timestamps, file_id
// references, ranges) and returns every problem found; nil means sound.
func Verify(dir string) []error { return formats.Verify(dir) }

// Repair recovers the bundle in dir in place, up to the last batch its
// writer flushed, and reports what it recovered.
func Repair(dir string) (*formats.RepairReport, error) {
	return formats.Repair(dir) // errors name the bundle and file
}

// Synth writes a deterministic synthetic bundle (see formats.Synth).
func Synth(dir string, spec formats.SynthSpec) error {
	if !slices.Contains(formats.SynthPatterns, spec.Pattern) {
		return usageErr("--pattern %q: want one of %s", spec.Pattern, strings.Join(formats.SynthPatterns, ", "))
	}
	if spec.Events < 0 {
		return usageErr("--events %d: must not be negative", spec.Events)
	}
	return formats.Synth(dir, spec) // "synth: create bundle: mkdir DIR: ..."
}
