package formats

import (
	"fmt"
	"slices"
	"strings"
)

// MissingFilesError is the error of Bundle.CheckReferences: rows of
// accesses.arrow or hints.arrow reference file ids that files.arrow lacks.
// It wraps ErrMissingFiles.
type MissingFilesError struct {
	Dir string
	// Accesses and Hints are the rows that reference a missing file, of
	// AccessRows and HintRows in all.
	Accesses, AccessRows uint64
	Hints, HintRows      uint64
	// IDs is the number of distinct missing file ids; Sample the smallest
	// of them (up to 5).
	IDs    int
	Sample []uint32
	// FirstTS is the smallest ts_ns of a row that references a missing
	// file. Rows before it are whole when Whole is true (some row precedes it).
	FirstTS uint64
	Whole   bool
}

func (e *MissingFilesError) Unwrap() error { return ErrMissingFiles }

func (e *MissingFilesError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "check bundle %s: ", e.Dir)
	var parts []string
	if e.Accesses > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d accesses", e.Accesses, e.AccessRows))
	}
	if e.Hints > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d hints", e.Hints, e.HintRows))
	}
	fmt.Fprintf(&sb, "%s reference %d file id(s) that %s lacks (%s), so their paths and sizes are unknown; ",
		strings.Join(parts, " and "), e.IDs, FilesFile, idList(e.Sample, len(e.Sample)))
	fmt.Fprintf(&sb, "if the bundle's writer was killed, run 'predictio trace repair %s'", e.Dir)
	if e.Whole {
		fmt.Fprintf(&sb, "; to keep the part that is whole (ts_ns before %d), run 'predictio trace slice %s -o OUT --to %d'", e.FirstTS, e.Dir, e.FirstTS)
	}
	fmt.Fprintf(&sb, ": %v", ErrMissingFiles)
	return sb.String()
}

// CheckReferences checks that every access and every hint with a non-zero
// file_id references a row of files.arrow, reading only the file_id (and,
// where needed, ts_ns) columns, with the bundle's integrity checks. It
// returns a *MissingFilesError (wrapping ErrMissingFiles) that says how many
// rows and ids are missing and what to do, or the error that stopped it.
// simulate and replay call it before they use a bundle: a row whose file is
// unknown has no size, path or identity.
//
// Every error it returns names the bundle directory.
func (b *Bundle) CheckReferences() error {
	files, err := b.Files()
	if err != nil {
		return fmt.Errorf("check bundle %s: %w", b.dir, err)
	}
	var known idSet
	for i := range files {
		known.add(files[i].ID)
	}
	e := &MissingFilesError{Dir: b.dir}
	missing := map[uint32]struct{}{}
	haveFirst := false
	scan := func(table string, fileCol, tsCol int, cols *columns, skipZero bool) (rows, bad uint64, err error) {
		if table == HintsFile && !b.hasHints() {
			return 0, 0, nil
		}
		tf, err := b.openTable(table)
		if err != nil {
			return 0, 0, err
		}
		defer tf.close()
		refs, err := tf.locate(cols)
		if err != nil {
			return 0, 0, err
		}
		dec := tf.newDecoder()
		for bi := range tf.batches {
			if err := tf.loadBatch(dec, bi); err != nil {
				return rows, bad, err
			}
			fb, err := fixed(dec, refs[fileCol], 4)
			if err != nil {
				return rows, bad, fmt.Errorf("read %s: batch %d: column file_id: %w", table, bi, err)
			}
			ids := asU32(fb)[:dec.rows]
			rows += uint64(len(ids))
			var ts []uint64
			last, lastOK := uint32(0), false
			for i, id := range ids {
				if lastOK && id == last || skipZero && id == 0 {
					continue
				}
				if known.has(id) {
					last, lastOK = id, true
					continue
				}
				lastOK = false
				bad++
				missing[id] = struct{}{}
				if ts == nil {
					tb, err := fixed(dec, refs[tsCol], 8)
					if err != nil {
						return rows, bad, fmt.Errorf("read %s: batch %d: column ts_ns: %w", table, bi, err)
					}
					ts = asU64(tb)
				}
				if !haveFirst || ts[i] < e.FirstTS {
					e.FirstTS, haveFirst = ts[i], true
				}
			}
		}
		return rows, bad, nil
	}
	if e.AccessRows, e.Accesses, err = scan(AccessesFile, acFile, acTS, accessesCols, false); err != nil {
		return fmt.Errorf("check bundle %s: %w", b.dir, err)
	}
	if e.HintRows, e.Hints, err = scan(HintsFile, hcFile, hcTS, hintsCols, true); err != nil {
		return fmt.Errorf("check bundle %s: %w", b.dir, err)
	}
	if len(missing) == 0 {
		return nil
	}
	e.IDs = len(missing)
	for id := range missing {
		e.Sample = append(e.Sample, id)
	}
	slices.Sort(e.Sample)
	e.Sample = e.Sample[:min(5, len(e.Sample))]
	e.Whole = e.FirstTS > b.firstTS()
	return e
}

// firstTS returns the smallest timestamp a slice can start at: the
// manifest's start, or 0.
func (b *Bundle) firstTS() uint64 {
	if b.man.Timing.FirstStartNS != 0 {
		return b.man.Timing.FirstStartNS
	}
	return b.man.Start.MonotonicNS
}
