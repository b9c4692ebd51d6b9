package formats

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// batchRows reads every row of the bundle in dir through AccessBatches
// with cols, into dst from several goroutines at once when workers > 1,
// in file order.
func batchRows(t *testing.T, dir string, cols AccessColumns, workers int) ([]Access, error) {
	t.Helper()
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ab, err := b.AccessBatches(cols)
	if err != nil {
		return nil, err
	}
	defer ab.Close()
	per := make([][]Access, ab.Len())
	errs := make([]error, ab.Len())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst AccessBatch
			for i := w; i < ab.Len(); i += workers {
				if errs[i] = ab.Read(i, &dst); errs[i] != nil {
					continue
				}
				if dst.Index != i {
					errs[i] = errors.New("wrong index")
				}
				for r := range dst.Rows {
					var a Access
					dst.Access(r, ab.CommDict(), &a)
					per[i] = append(per[i], a)
				}
			}
		}()
	}
	wg.Wait()
	var out []Access
	for i := range per {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, per[i]...)
	}
	return out, nil
}

// project returns a with the fields of columns not in cols zeroed.
func project(a Access, cols AccessColumns) Access {
	var p Access
	set := func(c AccessColumns, f func()) {
		if cols&c != 0 {
			f()
		}
	}
	set(ColTS, func() { p.TS = a.TS })
	set(ColPID, func() { p.PID = a.PID })
	set(ColTID, func() { p.TID = a.TID })
	set(ColComm, func() { p.Comm = a.Comm })
	set(ColFileID, func() { p.FileID = a.FileID })
	set(ColFirstPage, func() { p.FirstPage = a.FirstPage })
	set(ColNPages, func() { p.NPages = a.NPages })
	set(ColKind, func() { p.Kind = a.Kind })
	set(ColEndNS, func() { p.EndNS = a.EndNS })
	set(ColOp, func() { p.Op = a.Op })
	set(ColRet, func() { p.Ret = a.Ret })
	set(ColProt, func() { p.Prot = a.Prot })
	set(ColMapFirstPage, func() { p.MapFirstPage = a.MapFirstPage })
	set(ColMapPages, func() { p.MapPages = a.MapPages })
	return p
}

// TestAccessBatchesMatchCursor: AccessBatches gives the cursor's rows,
// whole or projected to some columns, read by one goroutine or several,
// on bundles of format 1.1 (random columns stored raw, a growing comm
// dictionary; every kind and 1.1 column) and 1.0 (columns missing).
func TestAccessBatchesMatchCursor(t *testing.T) {
	dirs := map[string]string{"integrity": integrityBundle(t), "format11": fuzzBundle(t)}
	for _, tb := range []string{"btree", "seq"} {
		dirs[tb] = filepath.Join("..", "testdata", tb)
	}
	projections := []AccessColumns{AllAccessColumns, ColTS | ColFirstPage, ColFileID | ColKind | ColNPages | ColEndNS | ColOp, ColComm | ColProt}
	for name, dir := range dirs {
		want := readRows(t, dir).accesses
		if len(want) == 0 {
			t.Fatalf("%s: no rows", name)
		}
		for _, cols := range projections {
			for _, workers := range []int{1, 3} {
				got, err := batchRows(t, dir, cols, workers)
				if err != nil {
					t.Fatalf("%s, columns %#x, %d workers: %v", name, cols, workers, err)
				}
				if len(got) != len(want) {
					t.Fatalf("%s, columns %#x: %d rows, want %d", name, cols, len(got), len(want))
				}
				for i := range want {
					if w := project(want[i], cols); !reflect.DeepEqual(got[i], w) {
						t.Fatalf("%s, columns %#x, %d workers: row %d is %+v, want %+v", name, cols, workers, i, got[i], w)
					}
				}
			}
		}
	}
}

// fuzzBundle writes the bundle of fuzzTables into a directory.
func fuzzBundle(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "f")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for n, b := range fuzzTables(t) {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestAccessBatchesProjection: columns not asked for are nil, and those of
// format 1.1 that a 1.0 bundle lacks read as zeros of the batch's length.
func TestAccessBatchesProjection(t *testing.T) {
	b, err := Open(filepath.Join("..", "testdata", "btree"))
	if err != nil {
		t.Fatal(err)
	}
	ab, err := b.AccessBatches(ColTS | ColEndNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	var dst AccessBatch
	if err := ab.Read(0, &dst); err != nil {
		t.Fatal(err)
	}
	if dst.Rows == 0 || len(dst.TS) != dst.Rows || len(dst.EndNS) != dst.Rows {
		t.Fatalf("rows %d, ts %d, end_ns %d", dst.Rows, len(dst.TS), len(dst.EndNS))
	}
	if dst.FirstPage != nil || dst.Kind != nil || dst.FileID != nil || dst.Comm != nil || ab.CommDict() != nil {
		t.Fatalf("columns not asked for were decoded: %+v", dst)
	}
	if b.Manifest().FormatVersion == "1.0.0" {
		for _, e := range dst.EndNS {
			if e != 0 {
				t.Fatalf("1.0 end_ns %d", e)
			}
		}
	}
	if err := ab.Read(ab.Len(), &dst); err == nil {
		t.Fatal("Read past the last batch succeeded")
	}
}

// TestAccessBatchesIntegrity: a flipped byte in a column that is not
// decoded still fails the batch's CRC32C, naming the file and batch; with
// NoVerify the projection reads (the byte is in a column it skips).
func TestAccessBatchesIntegrity(t *testing.T) {
	src := integrityBundle(t)
	dir := copyBundle(t, src)
	path := filepath.Join(dir, AccessesFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A byte inside the pid column's buffer of batch 1.
	off := columnByte(t, data, 1, acPID)
	data[off] ^= 0x10
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = batchRows(t, dir, ColTS|ColFirstPage, 2)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "batch 1") || !strings.Contains(err.Error(), path) {
		t.Fatalf("flipped pid byte, reading ts and first_page: %v; want ErrCorrupt naming %s and batch 1", err, path)
	}
	b, err := Open(dir, NoVerify())
	if err != nil {
		t.Fatal(err)
	}
	ab, err := b.AccessBatches(ColTS | ColFirstPage)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	var dst AccessBatch
	if err := ab.Read(1, &dst); err != nil {
		t.Fatalf("NoVerify: %v", err)
	}

	// Format 1.0: a flip anywhere fails the whole-file SHA-256 at open.
	dir = copyBundle(t, filepath.Join("..", "testdata", "seq"))
	b, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest().FormatVersion != "1.0.0" {
		t.Fatalf("testdata/seq is format %s; this case needs a 1.0 bundle", b.Manifest().FormatVersion)
	}
	path = filepath.Join(dir, AccessesFile)
	data, _ = os.ReadFile(path)
	data[len(data)/2] ^= 0x01
	os.WriteFile(path, data, 0o644)
	b, _ = Open(dir)
	if _, err := b.AccessBatches(ColTS); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("1.0 table with a flipped byte: %v, want a SHA-256 mismatch", err)
	}
}

// columnByte returns the offset in data of a byte inside the data buffer
// of column col (an accessesCols index) in batch bi.
func columnByte(t *testing.T, data []byte, bi, col int) int {
	t.Helper()
	tf, _, dec := loadBatch(t, data, AccessesFile, bi)
	refs, err := tf.locate(accessesCols)
	if err != nil {
		t.Fatal(err)
	}
	bm := dec.bufs[refs[col].buf+1]
	if bm.len < 16 {
		t.Fatalf("column %d buffer of %d bytes", col, bm.len)
	}
	return int(tf.batches[bi].off) + int(tf.batches[bi].metaLen) + int(bm.off) + 12
}

// TestAccessBatchesSame: Same names the columns whose contents repeat
// those of the previous Read into the AccessBatch (constant columns, and
// 1.1 columns a 1.0 file lacks), and no column that changed.
func TestAccessBatchesSame(t *testing.T) {
	seq := filepath.Join(t.TempDir(), "seq")
	w, err := Create(seq, WithBatchRows(1000))
	if err != nil {
		t.Fatal(err)
	}
	w.AddFile(File{ID: 1, Path: "/f", Mode: ModeRegular})
	for _, a := range seqRows(5000) {
		w.Append(&a)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{seq, integrityBundle(t), fuzzBundle(t)} {
		b, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		ab, err := b.AccessBatches(AllAccessColumns)
		if err != nil {
			t.Fatal(err)
		}
		var dst AccessBatch
		var prev []Access
		seen := AccessColumns(0)
		for i := range ab.Len() {
			if err := ab.Read(i, &dst); err != nil {
				t.Fatal(err)
			}
			if i == 0 && dst.Same != 0 {
				t.Fatalf("%s: first batch: Same %#x", dir, dst.Same)
			}
			cur := make([]Access, dst.Rows)
			for r := range cur {
				dst.Access(r, ab.CommDict(), &cur[r])
			}
			if dst.Same != 0 {
				seen |= dst.Same
				if len(prev) != len(cur) {
					t.Fatalf("%s batch %d: Same %#x with %d rows after %d", dir, i, dst.Same, len(cur), len(prev))
				}
				for r := range cur {
					p, c := project(prev[r], dst.Same&^ColComm), project(cur[r], dst.Same&^ColComm)
					if p != c {
						t.Fatalf("%s batch %d row %d: Same %#x but %+v became %+v", dir, i, r, dst.Same, p, c)
					}
				}
			}
			prev = cur
		}
		ab.Close()
		if dir == seq && (seen&(ColFirstPage|ColTS) != 0 || seen&(ColKind|ColFileID|ColEndNS) != ColKind|ColFileID|ColEndNS) {
			t.Errorf("%s: Same over the batches %#x: want kind, file_id and end_ns, not first_page or ts_ns", dir, seen)
		}
	}
}
