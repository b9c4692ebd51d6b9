package record

import (
	"path/filepath"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/source"
)

// Record's bundle-writing stages, for a caller that runs the source and
// its target itself: the live runtime's `predictio run -o BUNDLE` writes
// the batches its loop sees into a bundle with the same writer, manifest
// and finalize as Run.
//
//	p := record.StartStage(cfg)        // creates the bundle while the source loads
//	src, err := source.Open(...)       // exclude record.StageExclude(cfg)
//	st, err := p.Attach(src)           // the manifest's recording parameters and start
//	src.Start(consumer calling st.Consume)
//	...
//	sum, err := st.Finish()            // stops and closes the source, finalizes the bundle

// PendingStage is a bundle being created for a Stage.
type PendingStage struct {
	cfg Config
	b   *pendingBundle
}

// StartStage starts creating the bundle cfg.Output; cfg.Command,
// ToolVersion, HintSocket and the filters go into its manifest.
func StartStage(cfg Config) *PendingStage {
	return &PendingStage{cfg: cfg, b: startBundle(cfg)}
}

// StageExclude returns the path prefix a source feeding the stage must
// exclude: the bundle directory.
func StageExclude(cfg Config) string {
	abs, err := filepath.Abs(cfg.Output)
	if err != nil {
		return cfg.Output
	}
	return abs
}

// Discard removes what creating the bundle made (the source could not be
// opened).
func (p *PendingStage) Discard() { p.b.discard() }

// Attach waits for the bundle and binds it to src: from now on every
// batch Consume gets is within the manifest's start and end.
func (p *PendingStage) Attach(src *source.Source) (*Stage, error) {
	rec, err := p.b.recording(p.cfg, src)
	if err != nil {
		return nil, err
	}
	rec.w.Manifest().Start.Wall = time.Now()
	rec.w.Manifest().Start.MonotonicNS = source.MonotonicNow()
	rec.start = time.Now()
	return &Stage{rec: rec}, nil
}

// Stage writes a source's batches into a bundle.
type Stage struct {
	rec *recording
}

// Consume appends b's accesses and hints to the bundle (source.Consumer).
func (s *Stage) Consume(b *source.Batch) error { return s.rec.sink.Consume(b) }

// Finish is Run's finalize: it stops the source (draining it into the
// bundle through its consumer), flushes the last rows with their file
// rows, writes the counters and notes, closes the source and the bundle.
func (s *Stage) Finish() (*Summary, error) { return s.rec.finalize() }

// Abort removes the unfinished bundle's temporary state (the bundle is
// left as a crash would leave it: `predictio trace repair` recovers it).
func (s *Stage) Abort() { s.rec.abortUnlessFinished() }

// Manifest is the bundle's manifest, for the caller's notes and its
// recording.source ("run").
func (s *Stage) Manifest() *formats.Manifest { return s.rec.w.Manifest() }
