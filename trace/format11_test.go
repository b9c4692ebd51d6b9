package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/predictio/predictio/formats"
)

// launchBundle writes a synthetic program launch: every access kind of
// format 1.1, service times, mappings and a path-only file.
func launchBundle(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "launch")
	if err := Synth(dir, formats.SynthSpec{Pattern: "launch", Events: 1500, Files: 2, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// parquetKindNames reads the kind and kind_name columns of an exported
// table.
func parquetKindNames(t *testing.T, path string) (kinds []uint8, names []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	ki, ni := tbl.Schema().FieldIndices("kind"), tbl.Schema().FieldIndices("kind_name")
	if len(ki) != 1 || len(ni) != 1 {
		t.Fatalf("%s: columns %v: no kind and kind_name", path, tbl.Schema())
	}
	if md := tbl.Schema().Metadata(); md.FindKey(formats.MetaCRC32C) >= 0 {
		t.Errorf("%s: the export carries the Arrow file's %s", path, formats.MetaCRC32C)
	}
	for _, c := range tbl.Column(ki[0]).Data().Chunks() {
		kinds = append(kinds, c.(*array.Uint8).Uint8Values()...)
	}
	for _, c := range tbl.Column(ni[0]).Data().Chunks() {
		for i := 0; i < c.Len(); i++ {
			names = append(names, c.ValueStr(i))
		}
	}
	return kinds, names
}

// TestExportKindNames: accesses.parquet and hints.parquet carry kind_name,
// for a 1.1 bundle (its own column) and a 1.0 one (derived from kind).
func TestExportKindNames(t *testing.T) {
	for _, dir := range []string{launchBundle(t), filepath.Join("..", "testdata", "btree")} {
		out := filepath.Join(t.TempDir(), "pq")
		if _, err := ExportParquet(dir, out); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			file  string
			names func(uint8) string
		}{
			{"accesses.parquet", func(k uint8) string { return formats.AccessKind(k).String() }},
			{"hints.parquet", func(k uint8) string { return formats.HintKind(k).String() }},
		} {
			path := filepath.Join(out, tc.file)
			if _, err := os.Stat(path); err != nil {
				continue // launch has no hints
			}
			kinds, names := parquetKindNames(t, path)
			if len(kinds) == 0 && tc.file == "hints.parquet" && strings.Contains(dir, "launch") {
				continue // launch has no hints
			}
			if len(kinds) == 0 || len(kinds) != len(names) {
				t.Fatalf("%s: %d kinds, %d names", path, len(kinds), len(names))
			}
			seen := map[string]bool{}
			for i, k := range kinds {
				if names[i] != tc.names(k) {
					t.Fatalf("%s row %d: kind %d named %q, want %q", path, i, k, names[i], tc.names(k))
				}
				seen[names[i]] = true
			}
			t.Logf("%s: kind names %v", path, seen)
		}
	}
}

// TestCatAndInfo11 prints the 1.1 columns and summarizes a launch bundle.
func TestCatAndInfo11(t *testing.T) {
	dir := launchBundle(t)
	var buf bytes.Buffer
	if err := Cat(&buf, dir, CatOptions{Format: "jsonl", Limit: 40}); err != nil {
		t.Fatal(err)
	}
	var sawMmap, sawFault bool
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r accessRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r.EndNS <= r.TS || r.Op == 0 {
			t.Fatalf("row without service time: %s", line)
		}
		switch r.Kind {
		case "mmap":
			sawMmap = r.Prot == formats.ProtRead|formats.ProtExec && r.MapPages > 0 && r.Ret > 0
		case "fault":
			sawFault = r.Prot&formats.ProtExec != 0 && r.MapPages > 0
		}
	}
	if !sawMmap || !sawFault {
		t.Fatalf("no mmap or fault row with its mapping in:\n%s", buf.String())
	}
	buf.Reset()
	if err := Cat(&buf, dir, CatOptions{Table: "files"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "2,0,0,/synth/etc/launch.conf,0,0,0\n") || !strings.Contains(buf.String(), ",16877\n") {
		t.Fatalf("files: path-only row or directory mode missing:\n%s", buf.String())
	}

	s, err := Info(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !s.ServiceTimes || s.RecordedWallNS == 0 || s.PathOnlyFiles != 1 || s.Integrity != formats.IntegrityCRC32C || s.MissingFileRows != 0 {
		t.Fatalf("summary %+v", s)
	}
	if want := issuedWall(t, dir); s.RecordedWallNS != want {
		t.Errorf("recorded wall %d, want %d: from the first issued row's start (not the exec row's) to the last completion", s.RecordedWallNS, want)
	}
	for _, k := range []string{"exec", "open", "stat", "readdir", "mmap", "fault", "map", "read"} {
		if s.Kinds[k] == 0 {
			t.Errorf("no %s in kinds %v", k, s.Kinds)
		}
	}
	buf.Reset()
	s.WriteText(&buf)
	for _, want := range []string{"yes: ts_ns is each operation's start", "path-only files", "verified: CRC32C"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("info text lacks %q:\n%s", want, buf.String())
		}
	}
	// A 1.0 bundle says what it lacks and how it is checked.
	s10, err := Info(filepath.Join("..", "testdata", "seq"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if s10.ServiceTimes || s10.Integrity != formats.IntegrityLegacy || s10.RecordedWallNS != s10.DurationNS {
		t.Fatalf("1.0 summary %+v", s10)
	}
	// Without checks, it says so.
	un, err := Info(dir, 1, formats.NoVerify())
	if err != nil || un.Integrity != formats.IntegritySkipped {
		t.Fatalf("NoVerify info: %+v, %v", un, err)
	}
	buf.Reset()
	un.WriteText(&buf)
	if !strings.Contains(buf.String(), "not verified (--no-verify)") {
		t.Errorf("info text with NoVerify:\n%s", buf.String())
	}
}

// TestCopies11 merges, slices and anonymizes 1.1 bundles: the columns
// survive, op ids stay unique, path-only rows are unified only with
// path-only rows, and the results verify.
func TestCopies11(t *testing.T) {
	a, b := launchBundle(t), launchBundle(t)
	out := filepath.Join(t.TempDir(), "m")
	rep, err := Merge(out, []string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if errs := formats.Verify(out); len(errs) > 0 {
		t.Fatalf("merge: %v", errs)
	}
	files, as, _ := readAll(t, out)
	ops := map[uint64]uint32{}
	for _, x := range as {
		if x.Op == 0 || x.EndNS == 0 {
			t.Fatalf("merged row lost its 1.1 columns: %+v", x)
		}
		ops[x.Op]++
	}
	// Each launch has 1500 rows; fault-around rows share their fault's op.
	_, a1, _ := readAll(t, a)
	distinct := map[uint64]bool{}
	for _, x := range a1 {
		distinct[x.Op] = true
	}
	if len(ops) != 2*len(distinct) {
		t.Fatalf("%d distinct ops in the merge, want %d: op ids collided", len(ops), 2*len(distinct))
	}
	if rep.Unified != uint64(len(files)) || !manifestOf(t, out).Timing.ServiceTimes {
		t.Fatalf("merge report %+v, %d files", rep, len(files))
	}

	// A path-only row and a real file with the same path stay apart.
	real := makeBundle(t, bundleSpec{
		files:    []formats.File{{ID: 1, Dev: 8 << 20, Ino: 77, Path: "/synth/etc/launch.conf", Size: 4096, Mode: formats.ModeRegular}},
		accesses: []formats.Access{{TS: 5, FileID: 1, NPages: 1, Kind: formats.KindRead}},
	})
	out2 := filepath.Join(t.TempDir(), "m2")
	if _, err := Merge(out2, []string{a, real}); err != nil {
		t.Fatal(err)
	}
	if errs := formats.Verify(out2); len(errs) > 0 {
		t.Fatalf("merge with a real file at a path-only path: %v", errs)
	}
	files2, _, _ := readAll(t, out2)
	n := 0
	for _, f := range files2 {
		if f.Path == "/synth/etc/launch.conf" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d rows for the path-only path, want 2 (the missing one and the real one)", n)
	}

	// A slice keeps an operation that ends after the window.
	m := manifestOf(t, a)
	to := a1[100].TS + 1
	sl := filepath.Join(t.TempDir(), "s")
	if _, err := Slice(a, sl, Bound{}, Bound{Set: true, Absolute: true, NS: to}); err != nil {
		t.Fatal(err)
	}
	if errs := formats.Verify(sl); len(errs) > 0 {
		t.Fatalf("slice: %v", errs)
	}
	_, sas, _ := readAll(t, sl)
	if len(sas) != 101 || sas[100] != a1[100] || manifestOf(t, sl).Timing.LastEndNS != a1[100].EndNS || m.Timing.LastEndNS == a1[100].EndNS {
		t.Fatalf("slice kept %d rows, last %+v", len(sas), sas[len(sas)-1])
	}

	an := filepath.Join(t.TempDir(), "an")
	if _, err := Anonymize(a, an, AnonymizeOptions{Salt: "s"}); err != nil {
		t.Fatal(err)
	}
	afiles, aas, _ := readAll(t, an)
	if !afiles[1].PathOnly() || strings.Contains(afiles[1].Path, "launch.conf") || !slices.Equal(aas, a1) {
		t.Fatalf("anonymize: files %+v", afiles)
	}
}

// TestNoVerifyCopyIsNoted: a bundle copied without checks says so.
func TestNoVerifyCopyIsNoted(t *testing.T) {
	src := launchBundle(t)
	out := filepath.Join(t.TempDir(), "s")
	if _, err := Slice(src, out, Bound{}, Bound{}, formats.NoVerify()); err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(manifestOf(t, out).Notes, "\n"); !strings.Contains(notes, "without integrity checks") {
		t.Fatalf("notes %q", notes)
	}
}

// TestImportModes: imported files have no inode but a file type, so they
// are not path-only.
func TestImportModes(t *testing.T) {
	src := writeTemp(t, "io.log", "fio version 3 iolog\n1 /d/a add\n5 /d/a read 0 8192\n6 /dev/nvme0n1 read 0 4096\n")
	out := filepath.Join(t.TempDir(), "imp")
	if _, err := Import(src, out, ImportOptions{From: "fio", PageSize: 4096}); err != nil {
		t.Fatal(err)
	}
	files, _, _ := readAll(t, out)
	if len(files) != 2 || files[0].Mode != formats.ModeRegular || files[1].Mode != formats.ModeBlock || files[0].PathOnly() {
		t.Fatalf("imported files %+v", files)
	}
	// A 1.0 import (no mode column) reads as regular files, not path-only.
	fb, _, _ := readAll(t, filepath.Join("..", "testdata", "fio-bundle"))
	if fb[0].Ino != 0 || fb[0].Mode != formats.ModeRegular {
		t.Fatalf("1.0 imported file %+v", fb[0])
	}
	mb, _, _ := readAll(t, filepath.Join("..", "testdata", "msr-bundle"))
	if mb[0].Mode != formats.ModeBlock {
		t.Fatalf("1.0 csv-imported file %+v", mb[0])
	}
}

// issuedWall returns the span of dir's rows of issued kinds (not its exec
// rows), and checks that the bundle's first row is an exec, which the span
// leaves out.
func issuedWall(t *testing.T, dir string) uint64 {
	t.Helper()
	b, err := formats.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ac, err := b.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	var first, last uint64
	n := 0
	for ; ac.Next(); n++ {
		a := ac.At()
		if n == 0 && a.Kind != formats.KindExec {
			t.Fatalf("the first row is %v, not exec", a.Kind)
		}
		if !a.Kind.Issued() {
			continue
		}
		if first == 0 || a.TS < first {
			first = a.TS
		}
		last = max(last, a.TS, a.EndNS)
	}
	if err := ac.Err(); err != nil {
		t.Fatal(err)
	}
	if m := b.Manifest().Timing.RecordedWallNS; m != last-first {
		t.Errorf("manifest recorded wall %d, want %d", m, last-first)
	}
	return last - first
}

// TestInfoTracerCost: info sums format 1.2's recorder cost over the rows
// and prices its system calls at the manifest's syscall_cost_ns.
func TestInfoTracerCost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := formats.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.Manifest().Recording.SyscallCostNS = 200
	w.AddFile(formats.File{ID: 1, Dev: 5, Ino: 7, Path: "/a", Size: 1 << 20, Mode: formats.ModeRegular | 0o644})
	w.Append(&formats.Access{TS: 1000, EndNS: 2000, FileID: 1, NPages: 1, Kind: formats.KindRead, Op: 1, PID: 3, TID: 3, TracerNS: 1500, TracerCalls: 2})
	w.Append(&formats.Access{TS: 5000, EndNS: 6000, FileID: 1, FirstPage: 1, NPages: 1, Kind: formats.KindRead, Op: 2, PID: 3, TID: 4, TracerNS: 500, TracerCalls: 3})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Info(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.TracerNS != 2000 || s.TracerCalls != 5 || s.SyscallCostNS != 200 {
		t.Fatalf("tracer_ns %d, tracer_calls %d, syscall_cost_ns %v; want 2000, 5, 200", s.TracerNS, s.TracerCalls, s.SyscallCostNS)
	}
	var buf bytes.Buffer
	s.WriteText(&buf)
	if !strings.Contains(buf.String(), "recorder's cost") || !strings.Contains(buf.String(), "3µs in the think times") {
		t.Errorf("info text lacks the recorder's cost (2 µs + 5 × 200 ns):\n%s", buf.String())
	}
}
