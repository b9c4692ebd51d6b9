package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// integrityBundle writes a bundle whose access columns are random (so
// zstd stores their buffers raw), in batches of 500 rows, with a comm
// dictionary that grows (delta dictionary messages in the stream).
func integrityBundle(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, WithBatchRows(500))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(5))
	for id := uint32(1); id <= 3; id++ {
		if err := w.AddFile(File{ID: id, Ino: uint64(id), Path: "/f" + string(rune('a'+id)), Mode: ModeRegular}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2000; i++ {
		a := Access{TS: r.Uint64() >> 4, PID: r.Uint32(), TID: r.Uint32(), Comm: []string{"a", "b", "c", "d"}[i/500], FileID: uint32(1 + i%3),
			FirstPage: r.Uint64(), NPages: 1, Kind: KindRead, EndNS: r.Uint64(), Op: r.Uint64(), Ret: r.Int63()}
		if err := w.Append(&a); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			h := Hint{TS: r.Uint64(), PID: 1, Kind: HintCustom, FileID: 1, Name: "n", Source: HintSourceApp, TID: r.Uint32()}
			if err := w.AppendHint(&h); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// region is a byte range of a table file, by what it holds.
type region struct {
	what       string
	start, end int
	want       string // text the error must contain besides the file's path
}

// tableRegions locates the parts of a table file: the schema message, the
// first dictionary message's metadata and body, batch 1's metadata and body,
// the end-of-stream marker and the footer.
func tableRegions(t *testing.T, data []byte, name string) []region {
	t.Helper()
	tf, err := newTableFileBytes(data, name, tableOpts{verify: true})
	if err != nil {
		t.Fatal(err)
	}
	flen := int(binary.LittleEndian.Uint32(data[len(data)-10:]))
	footerStart := len(data) - 10 - flen
	sm, err := readMessage(data, 8)
	if err != nil {
		t.Fatal(err)
	}
	out := []region{{"schema message", 8, 8 + sm.size, "schema message"}}
	off := 8 + sm.size
	for off < footerStart {
		m, err := readMessage(data, off)
		if err != nil {
			t.Fatal(err)
		}
		if m.hdrType == msgDictionaryBatch {
			bodyStart := off + m.size - len(m.body)
			out = append(out, region{"dictionary metadata", off + 8, bodyStart, "offset"},
				region{"dictionary body", bodyStart, off + m.size, "dictionary message at offset"})
			break
		}
		off += m.size
	}
	if len(tf.batches) > 1 {
		b := tf.batches[1]
		out = append(out,
			region{"batch 1 metadata", int(b.off) + 8, int(b.off) + int(b.metaLen), "batch 1"},
			region{"batch 1 body", int(b.off) + int(b.metaLen), int(b.end()), "batch 1"})
	}
	out = append(out,
		region{"end-of-stream marker", footerStart - 8, footerStart, "offset"},
		region{"footer", footerStart, footerStart + flen, "footer"},
	)
	return out
}

// readTableAll reads every row of one table of the bundle in dir.
func readTableAll(dir, name string, opts ...OpenOption) error {
	b, err := Open(dir, opts...)
	if err != nil {
		return err
	}
	switch name {
	case FilesFile:
		_, err = b.Files()
		return err
	case AccessesFile:
		c, err := b.Accesses()
		if err != nil {
			return err
		}
		defer c.Close()
		for c.Next() {
		}
		return c.Err()
	}
	c, err := b.Hints()
	if err != nil {
		return err
	}
	defer c.Close()
	for c.Next() {
	}
	return c.Err()
}

func copyBundle(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestIntegrityRegions flips one byte in each region of each table and
// checks that reading the table fails with ErrCorrupt naming the file (by
// path) and the batch or part that changed.
func TestIntegrityRegions(t *testing.T) {
	src := integrityBundle(t)
	for _, name := range []string{AccessesFile, HintsFile, FilesFile} {
		orig, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		regions := tableRegions(t, orig, name)
		if want := map[string]int{AccessesFile: 7, HintsFile: 7, FilesFile: 3}[name]; len(regions) != want {
			t.Fatalf("%s: %d regions, want %d", name, len(regions), want)
		}
		for _, rg := range regions {
			for _, at := range []int{rg.start, (rg.start + rg.end) / 2, rg.end - 1} {
				dir := copyBundle(t, src)
				path := filepath.Join(dir, name)
				data := bytes.Clone(orig)
				data[at] ^= 0x10
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				err := readTableAll(dir, name)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), rg.want) {
					t.Errorf("%s: byte %d flipped in the %s: %v; want ErrCorrupt naming %s and %q", name, at, rg.what, err, path, rg.want)
				}
				// Verify says the same; with no hint of repair for damage.
				if errs := Verify(dir); len(errs) == 0 || errors.Is(errors.Join(errs...), ErrIncomplete) {
					t.Errorf("%s: %s flipped: Verify %v", name, rg.what, errs)
				}
			}
		}
	}
}

// rawBufferByte returns the offset in data of a byte inside a raw-stored
// (incompressible) body buffer of batch bi.
func rawBufferByte(t *testing.T, data []byte, name string, bi int) int {
	return bufferByte(t, data, name, bi, true)
}

// bufferByte returns the offset in data of a byte inside a raw-stored (raw)
// or zstd-compressed body buffer of batch bi.
func bufferByte(t *testing.T, data []byte, name string, bi int, raw bool) int {
	t.Helper()
	tf, m, dec := loadBatch(t, data, name, bi)
	bodyStart := int(tf.batches[bi].off) + int(tf.batches[bi].metaLen)
	for _, bm := range dec.bufs {
		if bm.len > 64 && (binary.LittleEndian.Uint64(m.body[bm.off:]) == ^uint64(0)) == raw {
			return bodyStart + int(bm.off) + 8 + 17
		}
	}
	t.Fatalf("no buffer (raw %v)", raw)
	return 0
}

// loadBatch opens table file data (named name) and decodes the header of
// its batch bi.
func loadBatch(t *testing.T, data []byte, name string, bi int) (*tableFile, message, *batchDecoder) {
	t.Helper()
	tf, err := newTableFileBytes(data, name, tableOpts{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := readMessage(data, int(tf.batches[bi].off))
	if err != nil {
		t.Fatal(err)
	}
	dec := newBatchDecoder()
	if err := dec.load(m.hdr, m.body); err != nil {
		t.Fatal(err)
	}
	return tf, m, dec
}

// TestIntegrityCheckMatters flips a byte of stored data that decodes
// without error: unchecked (NoVerify) the rows silently change, checked the
// read fails naming the file and batch. It fails if the check is removed.
func TestIntegrityCheckMatters(t *testing.T) {
	src := integrityBundle(t)
	want := readRows(t, src).accesses
	dir := copyBundle(t, src)
	path := filepath.Join(dir, AccessesFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[rawBufferByte(t, data, AccessesFile, 2)] ^= 0x01
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	b, err := Open(dir, NoVerify())
	if err != nil {
		t.Fatal(err)
	}
	if b.Integrity() != IntegritySkipped {
		t.Fatalf("integrity %q with NoVerify", b.Integrity())
	}
	c, err := b.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i := 0; c.Next(); i++ {
		if *c.At() != want[i] {
			changed++
		}
	}
	if err := c.Err(); err != nil {
		t.Fatalf("NoVerify read: %v", err)
	}
	c.Close()
	if changed != 1 {
		t.Fatalf("the flip changed %d rows unchecked, want 1", changed)
	}

	err = readTableAll(dir, AccessesFile)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "batch 2") || !strings.Contains(err.Error(), "CRC32C") {
		t.Fatalf("verified read: %v, want ErrCorrupt naming %s, batch 2 and the CRC32C", err, path)
	}
	// Raw Arrow access (export) checks it too.
	b, _ = Open(dir)
	tb, err := b.OpenTable(AccessesFile)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if _, err := tb.Batch(2); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "batch 2") {
		t.Fatalf("Table.Batch(2): %v", err)
	}
	if rec, err := tb.Batch(1); err != nil {
		t.Fatalf("Table.Batch(1) of an intact batch: %v", err)
	} else {
		rec.Release()
	}
	// Damage is not a truncation: repair refuses and says so.
	if _, err := Repair(dir); err == nil || !strings.Contains(err.Error(), "damaged, not truncated") {
		t.Fatalf("Repair of a damaged bundle: %v", err)
	}
}

// TestFormat10Bundle reads a testdata bundle of format 1.0: the 1.1
// columns read as zero, and without CRCs it is checked with zstd frame
// checksums and the manifest's SHA-256.
func TestFormat10Bundle(t *testing.T) {
	src := filepath.Join("..", "testdata", "btree")
	b, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	if v := b.Manifest().FormatVersion; v != "1.0.0" {
		t.Skipf("testdata/btree is format %s; this test needs the 1.0 bundle", v)
	}
	if b.Integrity() != IntegrityLegacy || b.HasServiceTimes() {
		t.Fatalf("integrity %q, service times %v", b.Integrity(), b.HasServiceTimes())
	}
	if ok, err := b.HasColumn(AccessesFile, "end_ns"); ok || err != nil {
		t.Fatalf("HasColumn(end_ns) = %v, %v on a 1.0 bundle", ok, err)
	}
	if ok, _ := b.HasColumn(AccessesFile, "npages"); !ok {
		t.Fatal("HasColumn(npages) = false")
	}
	r := readRows(t, src)
	if len(r.accesses) == 0 || len(r.hints) == 0 {
		t.Fatal("empty testdata bundle")
	}
	for _, a := range r.accesses {
		if a.EndNS != 0 || a.Op != 0 || a.Ret != 0 || a.Prot != 0 || a.MapFirstPage != 0 || a.MapPages != 0 {
			t.Fatalf("1.0 access with 1.1 columns: %+v", a)
		}
	}
	for _, h := range r.hints {
		if h.TID != 0 || h.Source != "" {
			t.Fatalf("1.0 hint with 1.1 columns: %+v", h)
		}
	}
	for _, f := range r.files {
		if f.Mode != 0 {
			t.Fatalf("1.0 file with a mode: %+v", f)
		}
	}
	if err := b.CheckReferences(); err != nil {
		t.Fatal(err)
	}

	// The schema message is not read by the cursors, so only the SHA-256
	// sees a flip there.
	dir := copyBundle(t, src)
	path := filepath.Join(dir, AccessesFile)
	data, _ := os.ReadFile(path)
	data[20] ^= 0x01
	os.WriteFile(path, data, 0o644)
	if err := readTableAll(dir, AccessesFile); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "SHA-256") || !strings.Contains(err.Error(), path) {
		t.Fatalf("1.0 table with a flipped schema byte: %v, want a SHA-256 mismatch naming %s", err, path)
	}
	if err := readTableAll(dir, AccessesFile, NoVerify()); err != nil {
		t.Fatalf("NoVerify: %v", err)
	}
	// A flip in a compressed buffer of the first of two batches fails its
	// zstd frame checksum (before the SHA-256 is complete).
	dir = copyBundle(t, filepath.Join("..", "testdata", "seq"))
	path = filepath.Join(dir, AccessesFile)
	data, _ = os.ReadFile(path)
	data[bufferByte(t, data, AccessesFile, 0, false)] ^= 0x01
	os.WriteFile(path, data, 0o644)
	if err := readTableAll(dir, AccessesFile); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "batch 0") {
		t.Fatalf("1.0 table with a flipped body byte: %v, want ErrCorrupt naming batch 0", err)
	}
}
