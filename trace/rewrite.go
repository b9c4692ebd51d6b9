package trace

import (
	"fmt"
	"os"

	"github.com/predictio/predictio/formats"
)

// rewriter describes how copy transforms a bundle. Nil funcs keep rows
// unchanged; a func returning false drops the row. Row pointers are only
// valid during the call.
type rewriter struct {
	file     func(f *formats.File) bool
	access   func(a *formats.Access) bool
	hint     func(h *formats.Hint) bool
	manifest func(m *formats.Manifest) // edits the output manifest after rows are copied
}

// copyCounts are the rows copy wrote.
type copyCounts struct {
	Files, Events, Hints uint64
}

// rewrite streams the bundle in dir into a new bundle out through rw. The
// output has format FormatVersion: a 1.0 source's rows get the 1.1 columns
// as zero. File rows are written before the rows that reference them; a
// source whose rows reference a file it lacks cannot be copied (the error
// names the ids; 'predictio trace verify' lists the rows).
func rewrite(in, out string, rw rewriter, opts []formats.OpenOption) (copyCounts, error) {
	var cc copyCounts
	b, err := openBundle(in, opts)
	if err != nil {
		return cc, err
	}
	defer b.Close()
	w, err := formats.Create(out)
	if err != nil {
		return cc, err // "create bundle: mkdir OUT: ..."
	}
	fail := func(err error) (copyCounts, error) {
		w.Abort()
		os.RemoveAll(out)
		return cc, err
	}
	files, err := b.Files()
	if err != nil {
		return fail(err)
	}
	for i := range files {
		f := &files[i]
		if rw.file != nil && !rw.file(f) {
			continue
		}
		if err := w.AddFile(*f); err != nil {
			return fail(fmt.Errorf("write %s: %w", formats.FilesFile, err))
		}
		cc.Files++
	}
	var a formats.Access
	err = forEachAccess(b, func(src *formats.Access) error {
		a = *src
		if rw.access != nil && !rw.access(&a) {
			return nil
		}
		cc.Events++
		return w.Append(&a)
	})
	if err != nil {
		return fail(fmt.Errorf("%s: %w", in, err))
	}
	var h formats.Hint
	err = forEachHint(b, func(src *formats.Hint) error {
		h = *src
		if rw.hint != nil && !rw.hint(&h) {
			return nil
		}
		cc.Hints++
		return w.AppendHint(&h)
	})
	if err != nil {
		return fail(fmt.Errorf("%s: %w", in, err))
	}
	copyManifest(w.Manifest(), b.Manifest())
	m := w.Manifest()
	if b.Integrity() == formats.IntegritySkipped {
		m.Notes = append(m.Notes, noVerifyNote(in))
	}
	m.ToolVersion = ToolVersion
	m.Counters.Events, m.Counters.Hints, m.Counters.Files = cc.Events, cc.Hints, cc.Files
	if rw.manifest != nil {
		rw.manifest(m)
	}
	if err := w.Close(); err != nil {
		return cc, fmt.Errorf("close bundle %s: %w", out, err)
	}
	return cc, nil
}

// copyManifest copies what describes the recording from src to dst,
// leaving what the writer owns (format version, tables, checksums).
func copyManifest(dst, src *formats.Manifest) {
	dst.Host = src.Host
	dst.Filesystems = append([]formats.Filesystem(nil), src.Filesystems...)
	dst.Recording = src.Recording
	dst.Recording.CommandLine = append([]string(nil), src.Recording.CommandLine...)
	dst.Recording.Adapters = append([]string(nil), src.Recording.Adapters...)
	// The writer derives the other timing fields from the rows it copies.
	dst.Timing = formats.Timing{ServiceTimes: src.Timing.ServiceTimes}
	dst.Start, dst.End = src.Start, src.End
	dst.Counters = src.Counters
	dst.Notes = append([]string(nil), src.Notes...)
	if !src.Complete {
		dst.Notes = append(dst.Notes, "copied from an incomplete (repaired) bundle")
	}
}

// noVerifyNote is the manifest note of a bundle copied with NoVerify.
func noVerifyNote(in string) string {
	return "copied from " + in + " without integrity checks (--no-verify): damaged source data would have been copied as it was"
}
