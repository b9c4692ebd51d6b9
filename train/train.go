// Package train builds history models from recorded bundles: the per-file
// first-order Markov models of the markov policy (docs/train.md).
package train

import (
	"errors"
	"fmt"

	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate"
)

// maxAccessPages bounds the pages one access contributes to a sequence
// when the file size is unknown, so that a corrupt npages cannot allocate
// without bound.
const maxAccessPages = 1 << 16

// Run summarizes one training bundle.
type Run struct {
	Dir      string `json:"dir"`
	Accesses uint64 `json:"accesses"` // rows read
	Demand   uint64 `json:"demand"`   // demand accesses used
	Pages    uint64 `json:"pages"`    // pages appended to sequences
	Files    int    `json:"files"`    // files with a sequence
	// Skipped counts files left out: no path (the model is keyed by
	// path) or size 0 (no page can be validated against it).
	Skipped int `json:"skipped"`
	// Clipped counts pages at or beyond end of file, dropped.
	Clipped uint64 `json:"clipped"`
}

// Result is the outcome of Markov.
type Result struct {
	Model    *policies.MarkovModel
	Runs     []Run
	Warnings []string
}

// Markov trains one model from the bundles in dirs, one run each, in the
// order given. Files are matched across runs by path; when a path's size or
// mtime differs between runs the file changed, and the runs of the newest
// (last given) version win, with a warning.
func Markov(dirs []string) (*Result, error) {
	if len(dirs) == 0 {
		return nil, errors.New("train markov: no bundles given")
	}
	var (
		b        *policies.MarkovBuilder
		pageSize int
		res      = &Result{}
		seqs     = map[uint32][]uint64{} // reused across runs
	)
	for i, dir := range dirs {
		in, err := simulate.OpenInput(dir)
		if err != nil {
			return nil, fmt.Errorf("train markov: %w", err)
		}
		if b == nil {
			pageSize = in.PageSize
			b = policies.NewMarkovBuilder(uint32(pageSize))
		} else if in.PageSize != pageSize {
			in.Close()
			return nil, fmt.Errorf("train markov: %s: page size %d differs from %d of %s; train runs of one machine together", dir, in.PageSize, pageSize, dirs[0])
		}
		run, err := addRun(b, i, in, seqs)
		in.Close()
		if err != nil {
			return nil, fmt.Errorf("train markov: %w", err)
		}
		res.Runs = append(res.Runs, run)
	}
	res.Model = b.Build()
	res.Warnings = b.Warnings()
	return res, nil
}

// addRun appends the demand page sequence of every file of one bundle to b.
func addRun(b *policies.MarkovBuilder, run int, in *simulate.Input, seqs map[uint32][]uint64) (Run, error) {
	r := Run{Dir: in.Dir}
	for id, s := range seqs {
		seqs[id] = s[:0]
	}
	cur, err := in.Bundle.Accesses()
	if err != nil {
		return r, fmt.Errorf("%s: %w", in.Dir, err) // formats names the file and batch
	}
	defer cur.Close()
	for cur.Next() {
		a := cur.At()
		r.Accesses++
		if !policies.IsDemand(a.Kind) {
			continue
		}
		r.Demand++
		eof := in.FilePages(a.FileID)
		n := uint64(max(a.NPages, 1))
		if eof == 0 {
			n = min(n, maxAccessPages)
		} else if a.FirstPage >= eof {
			r.Clipped += n
			continue
		} else if a.FirstPage+n > eof || a.FirstPage+n < a.FirstPage {
			r.Clipped += n - (eof - a.FirstPage)
			n = eof - a.FirstPage
		}
		s := seqs[a.FileID]
		for p := a.FirstPage; p < a.FirstPage+n; p++ {
			if len(s) > 0 && s[len(s)-1] == p {
				continue // repeated touches of one page are one state
			}
			s = append(s, p)
			r.Pages++
		}
		seqs[a.FileID] = s
	}
	if err := cur.Err(); err != nil {
		return r, fmt.Errorf("%s: %w", in.Dir, err) // formats names the file and batch
	}
	for id, s := range seqs {
		if len(s) == 0 {
			continue
		}
		key, ok := in.FileKey(id)
		if !ok || key.Size == 0 {
			r.Skipped++
			continue
		}
		b.AddRun(run, key, s)
		r.Files++
	}
	return r, nil
}

// HoldoutResult is the evaluation of a model on runs left out of training.
type HoldoutResult struct {
	Train   *Result
	Dirs    []string           // the held-out bundles
	Reports []*simulate.Report // one per held-out bundle
}

// Holdout trains on all but the last k bundles and simulates each of the k
// held-out bundles with cfg plus the markov policy (spec, default "markov")
// using the model. cfg's Env is replaced by each bundle's.
func Holdout(dirs []string, k int, spec string, cfg simulate.Config, warn func(string)) (*HoldoutResult, error) {
	if k < 1 || k >= len(dirs) {
		return nil, fmt.Errorf("train markov: --holdout %d needs between 1 and %d (one fewer than the %d bundles given)", k, len(dirs)-1, len(dirs))
	}
	tr, err := Markov(dirs[:len(dirs)-k])
	if err != nil {
		return nil, err
	}
	if spec == "" {
		spec = "markov"
	}
	hr := &HoldoutResult{Train: tr, Dirs: dirs[len(dirs)-k:]}
	for _, dir := range hr.Dirs {
		r, err := evaluate(dir, tr.Model, spec, cfg, warn)
		if err != nil {
			return nil, fmt.Errorf("evaluate holdout %s: %w", dir, err)
		}
		hr.Reports = append(hr.Reports, r)
	}
	return hr, nil
}

func evaluate(dir string, m *policies.MarkovModel, spec string, cfg simulate.Config, warn func(string)) (*simulate.Report, error) {
	in, err := simulate.OpenInput(dir)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	cfg.PageSize = in.PageSize
	cfg.Env = in.Env()
	cfg.Env.Markov = m
	cfg.Env.Warn = warn
	cfg.Policies = []string{spec}
	if cfg.Oracle {
		if cfg.Env.Future, err = in.Future(); err != nil {
			return nil, err
		}
	}
	src, err := in.Source()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return simulate.Run(cfg, src)
}

// Stats is the --json output shape of a training.
type Stats struct {
	Runs   []Run `json:"runs"`
	Files  int   `json:"files"`
	States int   `json:"states"`
}

// Summary returns file and state counts of the trained model.
func (r *Result) Summary() Stats {
	s := Stats{Runs: r.Runs}
	for _, f := range r.Model.Files() {
		s.Files++
		s.States += f.States()
	}
	return s
}
