package formats

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDictionaryDeltasBounded checks that comm dictionary deltas cannot add
// up past maxDictEntries: each delta is small on disk (compressed) but every
// entry costs a string header in memory.
func TestDictionaryDeltasBounded(t *testing.T) {
	defer func(v int64) { maxDictEntries = v }(maxDictEntries)
	maxDictEntries = 1000
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, WithBatchRows(400))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(File{ID: 1, Path: "/f", Mode: ModeRegular}); err != nil {
		t.Fatal(err)
	}
	// 1200 distinct comms in batches of 400: a dictionary and two deltas.
	for i := range 1200 {
		a := Access{TS: synthStartNS + uint64(i), PID: 1, TID: 1, Comm: fmt.Sprint("c", i), FileID: 1, NPages: 1, Kind: KindRead}
		if err := w.Append(&a); err != nil {
			t.Fatal(err)
		}
	}
	w.Manifest().Complete = true
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The footer holds the full dictionary; the stream holds the deltas,
	// which repair's scan applies one by one.
	data, err := os.ReadFile(filepath.Join(dir, AccessesFile))
	if err != nil {
		t.Fatal(err)
	}
	sc := scanStream(data, AccessesFile)
	if sc.stop == nil || !strings.Contains(sc.stop.Error(), "dictionary") || !strings.Contains(sc.stop.Error(), AccessesFile) {
		t.Fatalf("scan stopped with %v after %d rows, want an error naming %s and its dictionary", sc.stop, sc.rows, AccessesFile)
	}
	t.Log(sc.stop)
}
