package formats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
)

func TestKindNames(t *testing.T) {
	want := map[AccessKind]string{KindRead: "read", KindImported: "imported", KindOpen: "open", KindStat: "stat", KindReaddir: "readdir", KindExec: "exec", KindMmap: "mmap"}
	for k, n := range want {
		if k.String() != n || !k.Valid() {
			t.Errorf("AccessKind(%d) = %q, valid %v; want %q", k, k.String(), k.Valid(), n)
		}
		if p, err := ParseAccessKind(n); err != nil || p != k {
			t.Errorf("ParseAccessKind(%q) = %v, %v", n, p, err)
		}
	}
	if k := AccessKind(14); k.Valid() || k.String() != "kind14" {
		t.Errorf("kind 14: %q valid %v", k.String(), k.Valid())
	}
	if AccessKind(0).Valid() || HintKind(0).Valid() || HintKind(5).String() != "hint5" || HintLayerStart.String() != "layer_start" {
		t.Error("kind 0 or hint kind names")
	}
	for k := AccessKind(0); k < 20; k++ {
		if k.Metadata() && (k.Pages() || k.Mapping()) || k.Valid() && k.Metadata() == k.Pages() {
			t.Errorf("kind %s: metadata %v, pages %v, mapping %v", k, k.Metadata(), k.Pages(), k.Mapping())
		}
	}
	if !KindMmap.Pages() || !KindMmap.Mapping() || !KindExec.Metadata() || KindRead.Mapping() {
		t.Error("kind classes")
	}
	d := AccessKindDictionary()
	if len(d) != int(MaxAccessKind)+1 || d[0] != UndefinedKindName || d[KindMmap] != "mmap" {
		t.Errorf("access kind dictionary %v", d)
	}
	if _, err := ParseAccessKind("bogus"); err == nil || !strings.Contains(err.Error(), "readdir, exec or mmap") {
		t.Errorf("ParseAccessKind(bogus): %v", err)
	}
}

// launchRows is a small program launch in format 1.1: an exec, opens (one
// failed, of a path-only file), a stat, a readdir, an mmap of a library
// with its faults, and reads with service times; two rows carry the
// recorder's cost (format 1.2).
func launchRows() rows {
	var r rows
	r.files = []File{
		{ID: 1, Dev: 8 << 20, Ino: 100, Path: "/usr/bin/prog", Size: 64 << 10, Mode: ModeRegular | 0o755},
		{ID: 2, Dev: 8 << 20, Ino: 101, Path: "/usr/lib/libc.so.6", Size: 2 << 20, Mode: ModeRegular | 0o644},
		{ID: 3, Path: "/etc/prog.conf"}, // path-only: it did not exist
		{ID: 4, Dev: 8 << 20, Ino: 102, Path: "/usr/share/prog", Mode: ModeDir | 0o755},
		{ID: 5, Dev: 8 << 20, Ino: 103, Path: "/usr/share/prog/data", Size: 1 << 20, Mode: ModeRegular | 0o644},
	}
	ts := uint64(1e9)
	add := func(a Access, service uint64) {
		a.TS, a.EndNS, a.PID, a.TID, a.Comm = ts, ts+service, 50, 50, "prog"
		a.Op = uint64(len(r.accesses) + 1)
		r.accesses = append(r.accesses, a)
		ts += service + 1000
	}
	add(Access{Kind: KindExec, FileID: 1}, 0)
	r.accesses[0].EndNS = 0 // the exec event has no completion
	add(Access{Kind: KindOpen, FileID: 2, Ret: 3, TracerNS: 1234, TracerCalls: 3}, 2000)
	add(Access{Kind: KindMmap, FileID: 2, FirstPage: 0, NPages: 400, Prot: ProtRead | ProtExec, MapFirstPage: 0, MapPages: 400, Ret: 0x7f0000000000}, 3000)
	add(Access{Kind: KindFault, FileID: 2, FirstPage: 17, NPages: 1, Prot: ProtRead | ProtExec, MapPages: 400}, 50000)
	add(Access{Kind: KindMap, FileID: 2, FirstPage: 18, NPages: 15, Prot: ProtRead | ProtExec, MapPages: 400}, 1000)
	add(Access{Kind: KindOpen, FileID: 3, Ret: -2}, 1500)
	add(Access{Kind: KindStat, FileID: 3, Ret: -2}, 800)
	add(Access{Kind: KindOpen, FileID: 4, Ret: 4}, 1500)
	add(Access{Kind: KindReaddir, FileID: 4, Ret: 480}, 9000)
	add(Access{Kind: KindStat, FileID: 5, Ret: 0}, 700)
	add(Access{Kind: KindRead, FileID: 5, FirstPage: 0, NPages: 4, Ret: 16384, TracerNS: 1<<32 - 1, TracerCalls: 70000}, 90000)
	r.hints = []Hint{{TS: ts, PID: 50, TID: 51, Kind: HintCustom, FileID: 5, Name: "start", Source: HintSourceAdapter + "sqlite"}}
	return r
}

func TestFormat11RoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	in := launchRows()
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.Manifest().Timing.ServiceTimes = true
	w.Manifest().Recording.Adapters = []string{"sqlite"}
	m0 := w.Manifest()
	m0.Start.MonotonicNS = 1e9
	for _, f := range in.files {
		w.AddFile(f)
	}
	for i := range in.accesses {
		w.Append(&in.accesses[i])
	}
	for i := range in.hints {
		w.AppendHint(&in.hints[i])
	}
	m0.End.MonotonicNS = in.hints[0].TS
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if errs := Verify(dir); len(errs) != 0 {
		t.Fatalf("verify: %v", errs)
	}
	equalRows(t, readRows(t, dir), in)
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest()
	last := in.accesses[len(in.accesses)-1]
	// The wall starts at the open after the exec: an exec row is not an
	// operation replay re-issues.
	first := in.accesses[1].TS
	if !b.HasServiceTimes() || m.Timing.FirstStartNS != first || m.Timing.LastEndNS != last.EndNS || m.Timing.RecordedWallNS != last.EndNS-first {
		t.Fatalf("timing %+v, want the span %d to %d", m.Timing, first, last.EndNS)
	}
	if m.Recording.Kernel == "" || m.Recording.Kernel != m.Host.KernelRelease || !slices.Equal(m.Recording.Adapters, []string{"sqlite"}) {
		t.Fatalf("recording %+v", m.Recording)
	}
	if b.Integrity() != IntegrityCRC32C {
		t.Fatalf("integrity %q", b.Integrity())
	}
	files, _ := b.Files()
	if !files[2].PathOnly() || files[0].PathOnly() || files[3].PathOnly() {
		t.Fatalf("path-only: %+v", files)
	}
	// kind_name, as an Arrow reader sees it.
	for _, tc := range []struct {
		table string
		want  []string
	}{
		{AccessesFile, []string{"exec", "open", "mmap", "fault", "map", "open", "stat", "open", "readdir", "stat", "read"}},
		{HintsFile, []string{"custom"}},
	} {
		tb, err := b.OpenTable(tc.table)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := tb.Batch(0)
		if err != nil {
			t.Fatal(err)
		}
		col := rec.Column(rec.Schema().FieldIndices("kind_name")[0]).(*array.Dictionary)
		dict := col.Dictionary().(*array.String)
		var got []string
		for i := 0; i < col.Len(); i++ {
			got = append(got, dict.Value(col.GetValueIndex(i)))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s kind_name %v, want %v", tc.table, got, tc.want)
		}
		if tc.table == HintsFile {
			src := rec.Column(rec.Schema().FieldIndices("source")[0]).(*array.Dictionary)
			if v := src.Dictionary().(*array.String).Value(src.GetValueIndex(0)); v != "adapter:sqlite" {
				t.Errorf("hint source %q", v)
			}
		}
		rec.Release()
		tb.Close()
	}
}

// TestKindNameOfUndefinedKinds: rows of an undefined kind are named
// "undefined", and Verify catches a kind_name that disagrees with kind.
func TestKindNameOfUndefinedKinds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, _ := Create(dir)
	w.AddFile(File{ID: 1, Ino: 1, Path: "/f"})
	w.Append(&Access{FileID: 1, NPages: 1, Kind: KindRead})
	w.Append(&Access{FileID: 1, NPages: 1, Kind: 77})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := Open(dir)
	c, _ := b.Accesses()
	c.withKindName = true
	for c.Next() {
	}
	if c.Err() != nil || c.kindNameErrs != 0 {
		t.Fatalf("kind_name of a written bundle: %d rows disagree, %v", c.kindNameErrs, c.Err())
	}
	c.Close()
	tb, _ := b.OpenTable(AccessesFile)
	rec, _ := tb.Batch(0)
	col := rec.Column(rec.Schema().FieldIndices("kind_name")[0]).(*array.Dictionary)
	if got := col.Dictionary().(*array.String).Value(col.GetValueIndex(1)); got != UndefinedKindName {
		t.Fatalf("kind 77 named %q", got)
	}
	rec.Release()
	tb.Close()
	if errs := Verify(dir); !strings.Contains(errors.Join(errs...).Error(), "kind 77 is not defined") {
		t.Fatalf("verify: %v", errs)
	}
}

// TestVerify11Rules writes one row breaking each format 1.1 rule.
func TestVerify11Rules(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, AllowUnknownFiles())
	if err != nil {
		t.Fatal(err)
	}
	w.Manifest().Start.MonotonicNS = 1000
	w.Manifest().End.MonotonicNS = 9000
	w.AddFile(File{ID: 1, Ino: 1, Path: "/lib", Size: 1 << 20, Mode: ModeRegular})
	w.AddFile(File{ID: 2, Path: "/missing"}) // path-only
	w.AddFile(File{ID: 3})                   // path-only without a path
	bad := []Access{
		{TS: 2000, FileID: 1, Kind: KindOpen, NPages: 1, Ret: 3},                                         // metadata with pages
		{TS: 2000, FileID: 1, Kind: KindMmap, NPages: 0},                                                 // page kind without
		{TS: 2000, EndNS: 1500, FileID: 1, Kind: KindRead, NPages: 1},                                    // end before start
		{TS: 2000, EndNS: 9500, FileID: 1, Kind: KindRead, NPages: 1},                                    // end after the recording
		{TS: 2000, FileID: 1, Kind: KindRead, NPages: 1, Prot: ProtRead},                                 // mapping columns on a read
		{TS: 2000, FileID: 1, Kind: KindFault, NPages: 1, Prot: 0x30},                                    // prot bits
		{TS: 2000, FileID: 1, Kind: KindFault, FirstPage: 50, NPages: 1, MapFirstPage: 10, MapPages: 20}, // outside its mapping
		{TS: 2000, FileID: 1, Kind: KindMmap, FirstPage: 0, NPages: 8, MapFirstPage: 0, MapPages: 9},     // mmap range differs
		{TS: 2000, FileID: 2, Kind: KindRead, NPages: 1},                                                 // read of a path-only file
		{TS: 2000, FileID: 2, Kind: KindOpen, Ret: 5},                                                    // successful open of a path-only file
	}
	for i := range bad {
		w.Append(&bad[i])
	}
	w.AppendHint(&Hint{TS: 2000, Kind: HintCustom, Source: "plugin"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := errors.Join(Verify(dir)...)
	if got == nil {
		t.Fatal("Verify found nothing")
	}
	for _, want := range []string{
		"row 0: npages is 1, a open row covers no pages",
		"row 1: npages is 0",
		"row 2: end_ns 1500 before ts_ns 2000",
		"row 3: end_ns 9500 outside the recording",
		"row 4: a read row has mapping columns",
		"row 5: prot 0x30",
		"row 6: fault pages [50, +1) outside the mapping [10, +20)",
		"row 7: mmap row pages [0, +8) differ from its mapping [0, +9)",
		"row 8: a read row references file_id 2, whose ino 0 and mode 0 make it a path-only row",
		"row 9: a open of path-only file_id 2 succeeded (ret 5)",
		"file_id 3: a path-only row (ino 0, mode 0) has no path",
		`source "plugin"`,
	} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("Verify missed %q in:\n%v", want, got)
		}
	}
	if strings.Count(got.Error(), "\n")+1 != 12 {
		t.Errorf("Verify found more than the 12 problems written:\n%v", got)
	}
}

func TestWriterFileRule(t *testing.T) {
	t.Run("without a resolver", func(t *testing.T) {
		w, err := Create(filepath.Join(t.TempDir(), "b"), WithBatchRows(10))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		for i := 0; i < 9; i++ {
			if err := w.Append(&Access{FileID: 4, NPages: 1, Kind: KindRead}); err != nil {
				t.Fatal(err)
			}
		}
		err = w.Append(&Access{FileID: 5, NPages: 1, Kind: KindRead})
		if !errors.Is(err, ErrMissingFiles) || !strings.Contains(err.Error(), "(4, 5)") || !strings.Contains(err.Error(), "AddFile") {
			t.Fatalf("full batch referencing unadded files: %v", err)
		}
		if err := w.AddFile(File{ID: 4, Ino: 4}); !errors.Is(err, ErrMissingFiles) {
			t.Fatalf("the writer stays failed: %v", err)
		}
	})
	t.Run("added late, before the batch", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "b")
		w, _ := Create(dir, WithBatchRows(10))
		for i := 0; i < 25; i++ {
			if err := w.Append(&Access{TS: uint64(i), FileID: uint32(i/5 + 1), NPages: 1, Kind: KindRead}); err != nil {
				t.Fatal(err)
			}
			if i%5 == 3 {
				w.AddFile(File{ID: uint32(i/5 + 1), Ino: 9, Path: fmt.Sprint("/f", i/5+1)})
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if errs := Verify(dir); len(errs) != 0 {
			t.Fatal(errs)
		}
	})
	t.Run("resolver", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "b")
		var asked []uint32
		w, _ := Create(dir, WithBatchRows(10), WithFileResolver(func(id uint32) File {
			asked = append(asked, id)
			return File{Ino: uint64(id), Path: fmt.Sprint("/late/", id)}
		}))
		for i := 0; i < 30; i++ {
			w.Append(&Access{TS: uint64(i), FileID: uint32(i/10 + 1), NPages: 1, Kind: KindRead})
			w.AppendHint(&Hint{TS: uint64(i), Kind: HintCustom, FileID: 7})
			if i == 12 {
				w.AddFile(File{ID: 2, Ino: 2, Path: "/early/2"})
			}
			if i == 12 {
				// The files of the first accesses and hints batches
				// reached disk before them.
				data, _ := os.ReadFile(filepath.Join(dir, FilesFile))
				if sc := scanStream(data, FilesFile); sc.rows != 2 {
					t.Errorf("files.arrow holds %d rows after the first accesses and hints batches, want 2", sc.rows)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(asked, []uint32{1, 7, 3}) {
			t.Errorf("resolver asked for %v, want [1 7 3] (2 was added)", asked)
		}
		r := readRows(t, dir)
		var paths []string
		for _, f := range r.files {
			paths = append(paths, f.Path)
		}
		if !slices.Equal(paths, []string{"/late/1", "/late/7", "/early/2", "/late/3"}) {
			t.Errorf("files %v", paths)
		}
	})
}

func TestCheckReferences(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, _ := Create(dir, AllowUnknownFiles(), WithBatchRows(100))
	w.Manifest().Start.MonotonicNS = 500
	w.AddFile(File{ID: 1, Ino: 1, Path: "/a"})
	for i := 0; i < 1000; i++ {
		id := uint32(1)
		if i >= 600 && i%3 == 0 {
			id = uint32(10 + i%7)
		}
		w.Append(&Access{TS: uint64(1000 + i), FileID: id, NPages: 1, Kind: KindRead})
	}
	w.AppendHint(&Hint{TS: 1200, Kind: HintCustom, FileID: 99})
	w.AppendHint(&Hint{TS: 1300, Kind: HintCustom}) // no file
	w.Close()
	b, _ := Open(dir)
	err := b.CheckReferences()
	var mf *MissingFilesError
	if !errors.As(err, &mf) || !errors.Is(err, ErrMissingFiles) {
		t.Fatalf("CheckReferences: %v", err)
	}
	if mf.Accesses != 134 || mf.AccessRows != 1000 || mf.Hints != 1 || mf.HintRows != 2 || mf.IDs != 8 || mf.FirstTS != 1200 || !mf.Whole || !slices.Equal(mf.Sample, []uint32{10, 11, 12, 13, 14}) {
		t.Fatalf("%+v", mf)
	}
	for _, want := range []string{dir, "134 of 1000 accesses and 1 of 2 hints", "8 file id(s)", "trace repair " + dir, "trace slice " + dir + " -o OUT --to 1200"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if errs := Verify(dir); !errors.Is(errors.Join(errs...), ErrMissingFiles) {
		t.Errorf("Verify: %v", errs)
	}
	// A whole bundle passes.
	if err := mustOpen(t, smallBundle(t)).CheckReferences(); err != nil {
		t.Fatal(err)
	}
}

func mustOpen(t *testing.T, dir string) *Bundle {
	t.Helper()
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDefaultVerify: SetDefaultVerify(false) turns the checks off for
// Open without options, as --no-verify does in simulate, replay and train.
func TestDefaultVerify(t *testing.T) {
	defer SetDefaultVerify(true)
	dir := smallBundle(t)
	if mustOpen(t, dir).Integrity() != IntegrityCRC32C || !DefaultVerify() {
		t.Fatal("verification is not on by default")
	}
	SetDefaultVerify(false)
	if mustOpen(t, dir).Integrity() != IntegritySkipped || DefaultVerify() {
		t.Fatal("SetDefaultVerify(false) did not turn it off")
	}
}

// TestRepairHintSources: the hints source dictionary grows by deltas; a
// killed writer's hints are repaired with every source.
func TestRepairHintSources(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, _ := Create(dir, WithBatchRows(50))
	w.AddFile(File{ID: 1, Ino: 1, Path: "/db"})
	srcs := []string{HintSourceApp, "adapter:sqlite", "adapter:lmdb", "adapter:gguf"}
	for i := 0; i < 200; i++ {
		w.AppendHint(&Hint{TS: uint64(i), Kind: HintCustom, FileID: 1, Source: srcs[i/50], TID: uint32(i)})
	}
	w.Flush()
	w.Abort()
	if _, err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	r := readRows(t, dir)
	if len(r.hints) != 200 {
		t.Fatalf("%d hints", len(r.hints))
	}
	for i, h := range r.hints {
		if h.Source != srcs[i/50] || h.TID != uint32(i) {
			t.Fatalf("hint %d: %+v", i, h)
		}
	}
	if errs := Verify(dir); len(errs) != 0 {
		t.Fatal(errs)
	}
}

// TestRecordedWallIssuedRows checks that the recorded wall spans the
// operations the program issued only: a block device's metadata block
// read into the cache 90 ms before them, the exec, and the kernel's
// readahead and cache rows around the read are not in it, whether the
// writer closes the bundle or Repair rebuilds its manifest.
func TestRecordedWallIssuedRows(t *testing.T) {
	const ms = uint64(1e6)
	t0 := uint64(1e9)
	rows := []Access{
		{TS: t0, Kind: KindCacheAdd, FileID: 1, FirstPage: 77, NPages: 1},
		{TS: t0 + ms, Kind: KindExec, FileID: 2},
		{TS: t0 + 90*ms, EndNS: t0 + 91*ms, Kind: KindRead, FileID: 2, NPages: 1, Op: 1},
		{TS: t0 + 90*ms + 10, Kind: KindReadaheadSync, FileID: 2, NPages: 32},
		{TS: t0 + 95*ms, Kind: KindCacheAdd, FileID: 2, FirstPage: 40, NPages: 1},
	}
	for _, repair := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "b")
		w, err := Create(dir)
		if err != nil {
			t.Fatal(err)
		}
		w.Manifest().Timing.ServiceTimes = true
		w.AddFile(File{ID: 1, Dev: 5, Ino: 0xfc00000, Path: "/dev/vda", Size: 1 << 30, Mode: ModeBlock | 0o660})
		w.AddFile(File{ID: 2, Dev: 0xfc00000, Ino: 12, Path: "/usr/bin/prog", Size: 1 << 20, Mode: 0o100755})
		for i := range rows {
			a := rows[i]
			a.PID, a.TID, a.Comm = 7, 7, "prog"
			w.Append(&a)
		}
		if repair {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			w.Abort()
			if _, err := Repair(dir); err != nil {
				t.Fatal(err)
			}
		} else if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		tm := b.Manifest().Timing
		b.Close()
		if tm.FirstStartNS != t0+90*ms || tm.LastEndNS != t0+91*ms || tm.RecordedWallNS != ms {
			t.Errorf("repair %v: timing %+v, want the read's span: 90 ms to 91 ms", repair, tm)
		}
	}
}
