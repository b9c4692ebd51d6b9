package formats

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func smallBundle(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	if err := Synth(dir, SynthSpec{Pattern: "btree", Events: 300}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func editManifest(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, _ = json.Marshal(m)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWrongMajorVersion(t *testing.T) {
	dir := smallBundle(t)
	editManifest(t, dir, func(m map[string]any) { m["format_version"] = "2.1.0" })
	_, err := Open(dir)
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "2.1.0") || !strings.Contains(err.Error(), FormatVersion) {
		t.Fatalf("Open: %v; want ErrVersion naming 2.1.0 and %s", err, FormatVersion)
	}
	errs := Verify(dir)
	if len(errs) != 1 || !errors.Is(errs[0], ErrVersion) {
		t.Fatalf("Verify: %v", errs)
	}
	// A newer minor version of the same major is read.
	editManifest(t, dir, func(m map[string]any) { m["format_version"] = "1.7.0" })
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
}

func TestManifestErrorsNameFileAndField(t *testing.T) {
	dir := smallBundle(t)
	editManifest(t, dir, func(m map[string]any) { m["counters"] = map[string]any{"events": "many"} })
	_, err := Open(dir)
	if err == nil || !strings.Contains(err.Error(), ManifestFile) || !strings.Contains(err.Error(), "counters.events") {
		t.Fatalf("Open: %v; want an error naming %s and counters.events", err, ManifestFile)
	}
	editManifest(t, dir, func(m map[string]any) { delete(m, "counters"); delete(m, "format_version") })
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "format_version") {
		t.Fatalf("Open: %v; want an error naming format_version", err)
	}
}

func TestMissingFilesAreNamed(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), ManifestFile) {
		t.Fatalf("Open: %v", err)
	}
	dir := smallBundle(t)
	os.Remove(filepath.Join(dir, AccessesFile))
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Accesses(); err == nil || !strings.Contains(err.Error(), AccessesFile) {
		t.Fatalf("Accesses: %v", err)
	}
	if errs := Verify(dir); len(errs) == 0 || !strings.Contains(errors.Join(errs...).Error(), AccessesFile) {
		t.Fatalf("Verify: %v", errs)
	}
}

func TestMissingHintsMeansNoHints(t *testing.T) {
	dir := smallBundle(t)
	os.Remove(filepath.Join(dir, HintsFile))
	editManifest(t, dir, func(m map[string]any) { delete(m["tables"].(map[string]any), HintsFile) })
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.Hints()
	if err != nil {
		t.Fatal(err)
	}
	if h.Next() || h.Err() != nil {
		t.Fatal("hints from a bundle without hints.arrow")
	}
	if errs := Verify(dir); len(errs) != 0 {
		t.Fatalf("Verify: %v", errs)
	}
}

// TestForeignWriterExtraColumns reads an accesses.arrow written by arrow-go
// itself, with columns reordered, unknown extra columns of several types, a
// uint8-indexed comm dictionary and arrow-go's own zstd settings.
func TestForeignWriterExtraColumns(t *testing.T) {
	dir := smallBundle(t)
	mem := memory.NewGoAllocator()
	dictType := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "extra_list", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "kind", Type: arrow.PrimitiveTypes.Uint8},
		{Name: "comm", Type: dictType},
		{Name: "ts_ns", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "cpu", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "pid", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "tid", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "file_id", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "first_page", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "npages", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "note", Type: arrow.BinaryTypes.String},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	const n = 1000
	for i := 0; i < n; i++ {
		lb := b.Field(0).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.StringBuilder).Append("x")
		b.Field(1).(*array.Uint8Builder).Append(uint8(KindFault))
		b.Field(2).(*array.BinaryDictionaryBuilder).AppendString([]string{"a", "bb"}[i%2])
		b.Field(3).(*array.Uint64Builder).Append(synthStartNS + uint64(i))
		b.Field(4).(*array.Uint16Builder).Append(uint16(i))
		b.Field(5).(*array.Uint32Builder).Append(7)
		b.Field(6).(*array.Uint32Builder).Append(8)
		b.Field(7).(*array.Uint32Builder).Append(1)
		b.Field(8).(*array.Uint64Builder).Append(uint64(i))
		b.Field(9).(*array.Uint32Builder).Append(1)
		b.Field(10).(*array.StringBuilder).Append("note")
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(filepath.Join(dir, AccessesFile))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := ipc.NewFileWriter(f, ipc.WithSchema(schema), ipc.WithZstd())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	fw.Close()
	f.Close()
	// The manifest says 1.1, which requires CRCs: the foreign file fails.
	bun, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bun.Accesses(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), AccessesFile) {
		t.Fatalf("foreign table in a 1.1 bundle: %v, want ErrCorrupt naming %s", err, AccessesFile)
	}
	// As a 1.0 bundle, it is checked with zstd checksums and the SHA-256.
	sum, size, err := fileSHA256(filepath.Join(dir, AccessesFile))
	if err != nil {
		t.Fatal(err)
	}
	editManifest(t, dir, func(m map[string]any) {
		m["format_version"] = "1.0.0"
		m["tables"].(map[string]any)[AccessesFile] = map[string]any{"sha256": sum, "bytes": size, "rows": n}
	})
	bun, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if bun.Integrity() != IntegrityLegacy {
		t.Fatalf("integrity %q, want %q", bun.Integrity(), IntegrityLegacy)
	}
	c, err := bun.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for c.Next() {
		a := c.At()
		want := Access{TS: synthStartNS + uint64(i), PID: 7, TID: 8, Comm: []string{"a", "bb"}[i%2], FileID: 1, FirstPage: uint64(i), NPages: 1, Kind: KindFault}
		if *a != want {
			t.Fatalf("row %d: %+v, want %+v", i, *a, want)
		}
		i++
	}
	if c.Err() != nil || i != n {
		t.Fatalf("read %d rows: %v", i, c.Err())
	}
}

func TestWrongSchemaIsNamed(t *testing.T) {
	dir := smallBundle(t)
	schema := arrow.NewSchema([]arrow.Field{{Name: "ts_ns", Type: arrow.PrimitiveTypes.Int32}}, nil)
	f, _ := os.Create(filepath.Join(dir, AccessesFile))
	fw, _ := ipc.NewFileWriter(f, ipc.WithSchema(schema))
	fw.Close()
	f.Close()
	bun, _ := Open(dir, NoVerify())
	_, err := bun.Accesses()
	if err == nil || !strings.Contains(err.Error(), "ts_ns") || !strings.Contains(err.Error(), AccessesFile) {
		t.Fatalf("Accesses: %v", err)
	}
}

func TestVerifyFindsEachProblem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, AllowUnknownFiles())
	if err != nil {
		t.Fatal(err)
	}
	w.Manifest().Start.MonotonicNS = 1000
	w.Manifest().End.MonotonicNS = 2000
	w.AddFile(File{ID: 1, Path: "/f", Size: 10 * 4096, Mode: ModeRegular})
	w.Manifest().Host.PageSize = 4096
	good := Access{TS: 1500, FileID: 1, FirstPage: 2, NPages: 3, Kind: KindRead, Comm: "x"}
	bad := []Access{
		{TS: 1500, FileID: 1, NPages: 1, Kind: 99},                    // kind
		{TS: 1500, FileID: 1, NPages: 0, Kind: KindRead},              // npages
		{TS: 5000, FileID: 1, NPages: 1, Kind: KindRead},              // ts
		{TS: 1500, FileID: 9, NPages: 1, Kind: KindRead},              // file_id
		{TS: 1500, FileID: 1, FirstPage: 9, NPages: 2, Kind: KindMap}, // pages
	}
	w.Append(&good)
	for i := range bad {
		w.Append(&bad[i])
	}
	w.AppendHint(&Hint{TS: 1500, Kind: 77, FileID: 1})
	w.AppendHint(&Hint{TS: 1500, Kind: HintTreeChildEnter, FileID: 5})
	// Children are the upcoming children, after Position: no bound between them.
	w.AppendHint(&Hint{TS: 1500, Kind: HintTreeChildEnter, FileID: 1, Position: 2, Children: []uint64{1, 2}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	editManifest(t, dir, func(m map[string]any) {
		m["tables"].(map[string]any)[FilesFile].(map[string]any)["rows"] = 5
		m["tables"].(map[string]any)[HintsFile].(map[string]any)["sha256"] = strings.Repeat("0", 64)
	})
	got := errors.Join(Verify(dir)...)
	if got == nil {
		t.Fatal("Verify found nothing")
	}
	if strings.Contains(got.Error(), "hints.arrow: row 2") {
		t.Errorf("Verify rejected a tree_child_enter whose position exceeds its upcoming children:\n%v", got)
	}
	for _, want := range []string{
		"kind 99 is not defined", "npages is 0", "ts_ns 5000 outside", "file_id 9 is not in", "pages [9, 11) beyond",
		"kind 77 is not defined", "file_id 5 is not in",
		"files.arrow: 1 rows, manifest says 5", "hints.arrow: SHA-256",
	} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("Verify missed %q in:\n%v", want, got)
		}
	}
}

func TestCreateRules(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
	if _, err := Create(dir); err == nil {
		t.Fatal("Create in a non-empty directory succeeded")
	}
	w, err := Create(filepath.Join(dir, "new"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(File{ID: 3}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(File{ID: 3}); err == nil {
		t.Fatal("duplicate file id accepted")
	}
	w.Close()
	if err := w.Append(&Access{}); err == nil {
		t.Fatal("Append after Close succeeded")
	}
}

func TestDevEncoding(t *testing.T) {
	// st_dev of /dev/vda1-like 254:1 in glibc encoding.
	st := uint64(254)<<8 | 1
	d := KernelDev(st)
	if d != 254<<20|1 {
		t.Fatalf("KernelDev = %#x", d)
	}
	if ma, mi := KernelDevParts(d); ma != 254 || mi != 1 {
		t.Fatalf("parts %d:%d", ma, mi)
	}
	if PageSize() <= 0 {
		t.Fatal("page size")
	}
	h := HostInfo()
	if h.KernelRelease == "" || h.CPUs <= 0 || h.MemoryBytes == 0 || h.PageSize != PageSize() {
		t.Fatalf("HostInfo %+v", h)
	}
}
