//go:build !race

// The race detector allocates on its own: allocation counts are checked
// without it.

package formats

import (
	"path/filepath"
	"testing"
)

// TestNoAllocationsPerRow checks the hot paths' allocation counts (not
// their speed): Append and AccessCursor.Next allocate nothing per row, and
// HintCursor.Next nothing once its Children slice has grown.
func TestNoAllocationsPerRow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, WithBatchRows(1000))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(File{ID: 1, Path: "/f", Mode: ModeRegular}); err != nil {
		t.Fatal(err)
	}
	rows := seqRows(1000)
	i := 0
	// Warm up: the first batch interns comm values.
	for ; i < 1000; i++ {
		w.Append(&rows[i%len(rows)])
	}
	if n := testing.AllocsPerRun(500, func() {
		w.Append(&rows[i%len(rows)])
		i++
	}); n != 0 {
		t.Errorf("Append: %v allocations per row", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Next()
	if n := testing.AllocsPerRun(500, func() { c.Next() }); n != 0 {
		t.Errorf("AccessCursor.Next: %v allocations per row", n)
	}

	hdir := filepath.Join(t.TempDir(), "h")
	if err := Synth(hdir, SynthSpec{Pattern: "btree", Events: 3000}); err != nil {
		t.Fatal(err)
	}
	hb, _ := Open(hdir)
	hc, err := hb.Hints()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	hc.Next()
	if n := testing.AllocsPerRun(500, func() { hc.Next() }); n != 0 {
		t.Errorf("HintCursor.Next: %v allocations per row", n)
	}
}

// TestAccessBatchesNoAllocations: rereading into one AccessBatch
// allocates nothing once its buffers have grown.
func TestAccessBatchesNoAllocations(t *testing.T) {
	b, err := Open(integrityBundle(t))
	if err != nil {
		t.Fatal(err)
	}
	ab, err := b.AccessBatches(AllAccessColumns)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	var dst AccessBatch
	for i := range ab.Len() {
		if err := ab.Read(i, &dst); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	if n := testing.AllocsPerRun(20, func() {
		if err := ab.Read(i%ab.Len(), &dst); err != nil {
			t.Fatal(err)
		}
		i++
	}); n != 0 {
		t.Errorf("Read: %v allocations", n)
	}
}
