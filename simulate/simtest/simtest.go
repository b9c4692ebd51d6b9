// Package simtest writes small hand-made bundles for the simulate and train
// tests.
package simtest

import (
	"path/filepath"
	"testing"

	"github.com/predictio/predictio/formats"
)

// Bundle is the content of a test bundle.
type Bundle struct {
	Files    []formats.File
	Accesses []formats.Access
	Hints    []formats.Hint
	// BatchRows, when set, is the rows per record batch
	// (formats.WithBatchRows).
	BatchRows int
}

// Reads appends one-page read accesses of file to pages, think ns apart,
// starting at ts; it returns the next timestamp.
func (b *Bundle) Reads(file uint32, ts, think uint64, pages ...uint64) uint64 {
	for _, p := range pages {
		b.Accesses = append(b.Accesses, formats.Access{TS: ts, PID: 1, TID: 1, Comm: "test", FileID: file, FirstPage: p, NPages: 1, Kind: formats.KindRead})
		ts += think
	}
	return ts
}

// Write writes b into a new directory under t.TempDir() and returns it.
func Write(t testing.TB, name string, b *Bundle) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	var opts []formats.WriterOption
	if b.BatchRows > 0 {
		opts = append(opts, formats.WithBatchRows(b.BatchRows))
	}
	w, err := formats.Create(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range b.Files {
		if err := w.AddFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range b.Accesses {
		if err := w.Append(&b.Accesses[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range b.Hints {
		if err := w.AppendHint(&b.Hints[i]); err != nil {
			t.Fatal(err)
		}
	}
	m := w.Manifest()
	m.Host.PageSize = 4096
	m.Recording.Source = "test"
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
