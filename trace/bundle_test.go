package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/predictio/predictio/formats"
)

type bundleSpec struct {
	files    []formats.File
	accesses []formats.Access
	hints    []formats.Hint
	edit     func(m *formats.Manifest)
}

// makeBundle writes spec into a new bundle and returns its directory.
func makeBundle(t *testing.T, spec bundleSpec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	w, err := formats.Create(dir, formats.WithBatchRows(1000))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range spec.files {
		if err := w.AddFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range spec.accesses {
		if err := w.Append(&spec.accesses[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range spec.hints {
		if err := w.AppendHint(&spec.hints[i]); err != nil {
			t.Fatal(err)
		}
	}
	m := w.Manifest()
	m.Host = formats.HostInfo()
	m.Host.Hostname = "secret-host"
	m.Recording = formats.Recording{Source: "test", CommandLine: []string{"predictio", "record", "--", "/home/alice/run.sh"}, Include: []string{"/home/alice"}}
	first, last := ^uint64(0), uint64(0)
	for _, a := range spec.accesses {
		first, last = min(first, a.TS), max(last, a.TS, a.EndNS)
	}
	for _, h := range spec.hints {
		first, last = min(first, h.TS), max(last, h.TS)
	}
	if last > 0 {
		m.Start.MonotonicNS, m.End.MonotonicNS = first, last
	}
	m.Start.Wall = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.Counters = formats.Counters{Events: uint64(len(spec.accesses)), Hints: uint64(len(spec.hints)), Files: uint64(len(spec.files)), DroppedEvents: 7, DroppedHints: 3}
	if spec.edit != nil {
		spec.edit(m)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if errs := formats.Verify(dir); len(errs) > 0 {
		t.Fatalf("test bundle does not verify: %v", errs)
	}
	return dir
}

func readAll(t *testing.T, dir string) ([]formats.File, []formats.Access, []formats.Hint) {
	t.Helper()
	b, err := formats.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	var as []formats.Access
	if err := forEachAccess(b, func(a *formats.Access) error { as = append(as, *a); return nil }); err != nil {
		t.Fatal(err)
	}
	var hs []formats.Hint
	if err := forEachHint(b, func(h *formats.Hint) error {
		c := *h
		c.Children = append([]uint64(nil), h.Children...)
		hs = append(hs, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return files, as, hs
}

func manifestOf(t *testing.T, dir string) *formats.Manifest {
	t.Helper()
	b, err := formats.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := *b.Manifest()
	return &m
}

// sample is a small bundle with three files, mixed kinds and two hints.
func sample() bundleSpec {
	files := []formats.File{
		{ID: 1, Dev: 8 << 20, Ino: 11, Path: "/home/alice/db/data.sqlite", Size: 1 << 20, MtimeNS: 5, Mode: formats.ModeRegular | 0o644},
		{ID: 2, Dev: 8 << 20, Ino: 12, Path: "/home/alice/db/data.sqlite-wal", Size: 80 << 10},
		{ID: 3, Dev: 8 << 20, Ino: 13, Path: "", Size: 0},
	}
	var as []formats.Access
	for i := 0; i < 2500; i++ {
		k := formats.KindRead
		if i%5 == 0 {
			k = formats.KindCacheAdd
		}
		fid := uint32(1)
		if i%10 == 9 {
			fid = 2
		}
		if i == 2499 {
			fid = 3
		}
		a := formats.Access{TS: 1_000_000_000 + uint64(i)*1000, PID: 100, TID: 101, Comm: "sqlite3", FileID: fid, FirstPage: uint64(i % 16), NPages: 1 + uint32(i%3), Kind: k}
		if k == formats.KindRead {
			a.EndNS, a.Op, a.Ret = a.TS+400, uint64(i+1), int64(a.NPages)*4096
		}
		as = append(as, a)
	}
	hs := []formats.Hint{
		{TS: 1_000_000_500, PID: 100, TID: 101, Kind: formats.HintTreeChildEnter, FileID: 1, ParentPage: 3, Position: 1, Children: []uint64{4, 5, 6}, Source: "adapter:sqlite"},
		{TS: 1_002_000_000, PID: 100, TID: 102, Kind: formats.HintTensorLayout, FileID: 2, Name: "layer.0 \"w\"", OffsetBytes: 4096, LengthBytes: 8192, Source: formats.HintSourceApp},
	}
	return bundleSpec{files: files, accesses: as, hints: hs}
}

func TestInfo(t *testing.T) {
	dir := makeBundle(t, sample())
	s, err := Info(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if s.Events != 2500 || s.Hints != 2 || s.Files != 3 || s.Dropped != 7 {
		t.Errorf("events/hints/files/dropped = %d/%d/%d/%d, want 2500/2/3/7", s.Events, s.Hints, s.Files, s.Dropped)
	}
	if s.FirstTSNS != 1_000_000_000 || s.LastTSNS != 1_000_000_000+2499*1000 || s.DurationNS != 2499*1000 {
		t.Errorf("time span %d..%d (%d)", s.FirstTSNS, s.LastTSNS, s.DurationNS)
	}
	if s.Kinds["read"] != 2000 || s.Kinds["cache_add"] != 500 || s.HintKinds["tree_child_enter"] != 1 || s.HintKinds["tensor_layout"] != 1 {
		t.Errorf("kinds = %v, hint kinds = %v", s.Kinds, s.HintKinds)
	}
	want := []FileCount{{FileID: 1, Path: "/home/alice/db/data.sqlite", Accesses: 2250}, {FileID: 2, Path: "/home/alice/db/data.sqlite-wal", Accesses: 249}}
	for i := range s.TopFiles {
		s.TopFiles[i].Pages = 0
	}
	if !reflect.DeepEqual(s.TopFiles, want) {
		t.Errorf("top files = %+v, want %+v", s.TopFiles, want)
	}
	st, _ := os.Stat(filepath.Join(dir, formats.AccessesFile))
	if s.AccessesBytes != uint64(st.Size()) || s.BytesPerEvent != float64(st.Size())/2500 {
		t.Errorf("bytes per event %v from %d bytes", s.BytesPerEvent, s.AccessesBytes)
	}
	js, _ := json.Marshal(s)
	var m map[string]any
	json.Unmarshal(js, &m)
	for _, k := range []string{"events", "hints", "files", "duration_ns", "bytes_per_event", "dropped", "kinds", "top_files"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks key %q: %s", k, js)
		}
	}
	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"events", "2500", "dropped", "data.sqlite-wal", "bytes/event"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, text.String())
		}
	}
	if _, err := Info(filepath.Join(t.TempDir(), "missing"), 5); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Info on a missing bundle: error %v, want one naming it", err)
	}
}

func TestCat(t *testing.T) {
	dir := makeBundle(t, sample())
	for _, tc := range []struct {
		o     CatOptions
		lines int
		first string
		has   string
	}{
		{CatOptions{}, 2501, "ts_ns,pid,tid,comm,file_id,first_page,npages,kind,end_ns,op,ret,prot,map_first_page,map_pages,tracer_ns,tracer_calls", "1000000000,100,101,sqlite3,1,0,1,cache_add,0,0,0,0,0,0,0,0"},
		{CatOptions{Limit: 3}, 4, "ts_ns,pid,tid,comm,file_id,first_page,npages,kind,end_ns,op,ret,prot,map_first_page,map_pages,tracer_ns,tracer_calls", "1000001000,100,101,sqlite3,1,1,2,read,1000001400,2,8192,0,0,0,0,0"},
		{CatOptions{Table: "files", Format: "csv"}, 4, "file_id,dev,ino,path,size_bytes,mtime_ns,mode", "1,8388608,11,/home/alice/db/data.sqlite,1048576,5,33188"},
		{CatOptions{Table: "hints"}, 3, "ts_ns,pid,kind,file_id,parent_page,position,children,name,offset_bytes,length_bytes,tid,source", `1000000500,100,tree_child_enter,1,3,1,4 5 6,,0,0,101,adapter:sqlite`},
		{CatOptions{Table: "hints", Format: "jsonl"}, 2, `{"ts_ns":1000000500,"pid":100,"kind":"tree_child_enter","file_id":1,"parent_page":3,"position":1,"children":[4,5,6],"name":"","offset_bytes":0,"length_bytes":0,"tid":101,"source":"adapter:sqlite"}`, `"name":"layer.0 \"w\""`},
		{CatOptions{Format: "jsonl", Limit: 1}, 1, `{"ts_ns":1000000000,"pid":100,"tid":101,"comm":"sqlite3","file_id":1,"first_page":0,"npages":1,"kind":"cache_add","end_ns":0,"op":0,"ret":0,"prot":0,"map_first_page":0,"map_pages":0,"tracer_ns":0,"tracer_calls":0}`, ""},
	} {
		var buf bytes.Buffer
		if err := Cat(&buf, dir, tc.o); err != nil {
			t.Fatalf("%+v: %v", tc.o, err)
		}
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		if len(lines) != tc.lines || lines[0] != tc.first || !strings.Contains(buf.String(), tc.has) {
			t.Errorf("%+v: %d lines, first %q; want %d lines, first %q, containing %q", tc.o, len(lines), lines[0], tc.lines, tc.first, tc.has)
		}
	}
	for _, o := range []CatOptions{{Table: "bogus"}, {Format: "xml"}} {
		if err := Cat(&bytes.Buffer{}, dir, o); !errors.Is(err, ErrUsage) {
			t.Errorf("%+v: error %v, want a usage error", o, err)
		}
	}
}

func TestExportParquet(t *testing.T) {
	spec := sample()
	dir := makeBundle(t, spec)
	out := filepath.Join(t.TempDir(), "pq")
	res, err := ExportParquet(dir, out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"files.arrow": 3, "accesses.arrow": 2500, "hints.arrow": 2}
	if len(res) != 3 {
		t.Fatalf("exported %+v, want 3 tables", res)
	}
	for _, r := range res {
		if r.Rows != want[r.Table] {
			t.Errorf("%s: %d rows, want %d", r.Table, r.Rows, want[r.Table])
		}
		f, err := os.Open(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := file.NewParquetReader(f)
		if err != nil {
			t.Fatalf("%s: %v", r.Path, err)
		}
		cc, err := pr.MetaData().RowGroup(0).ColumnChunk(0)
		if err != nil {
			t.Fatal(err)
		}
		if cc.Compression() != compress.Codecs.Zstd {
			t.Errorf("%s: compression %v, want ZSTD", r.Path, cc.Compression())
		}
		if r.Table == "accesses.arrow" && !slices.Contains(cc.Encodings(), parquet.Encodings.DeltaBinaryPacked) {
			t.Errorf("%s: ts_ns encodings %v, want DELTA_BINARY_PACKED", r.Path, cc.Encodings())
		}
		fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", r.Path, err)
		}
		if tbl.NumRows() != want[r.Table] {
			t.Errorf("%s read back %d rows, want %d", r.Path, tbl.NumRows(), want[r.Table])
		}
		col := func(name string) int {
			idx := tbl.Schema().FieldIndices(name)
			if len(idx) != 1 {
				t.Fatalf("%s: no column %s in %v", r.Path, name, tbl.Schema())
			}
			return idx[0]
		}
		switch r.Table {
		case "accesses.arrow":
			ts := tbl.Column(col("ts_ns")).Data().Chunk(0).(*array.Uint64)
			pages := tbl.Column(col("first_page")).Data().Chunk(0).(*array.Uint64)
			if ts.Value(3) != spec.accesses[3].TS || pages.Value(3) != spec.accesses[3].FirstPage {
				t.Errorf("row 3: ts %d page %d, want %+v", ts.Value(3), pages.Value(3), spec.accesses[3])
			}
			comm := tbl.Column(col("comm")).Data().Chunk(0)
			if s := comm.ValueStr(0); s != "sqlite3" {
				t.Errorf("comm[0] = %q, want sqlite3", s)
			}
		case "files.arrow":
			p := tbl.Column(col("path")).Data().Chunk(0).(*array.String)
			if p.Value(0) != spec.files[0].Path {
				t.Errorf("path[0] = %q", p.Value(0))
			}
		case "hints.arrow":
			ch := tbl.Column(col("children")).Data().Chunk(0).(*array.List)
			vals := ch.ListValues().(*array.Uint64)
			if ch.Len() != 2 || vals.Len() != 3 || vals.Value(2) != 6 {
				t.Errorf("children = %v", ch)
			}
		}
		tbl.Release()
		f.Close()
	}
}

func TestImportToBundle(t *testing.T) {
	src := writeTemp(t, "io.log", "fio version 3 iolog\n1 /d/a add\n5 /d/a read 0 8192\n9 /d/b read 40960 4096\n12 /d/a write 0 4096\n")
	out := filepath.Join(t.TempDir(), "imp")
	rep, err := Import(src, out, ImportOptions{From: "fio", PageSize: 4096, CommandLine: []string{"predictio", "trace", "import"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != 2 || rep.Files != 2 || rep.Skipped["write"] != 1 {
		t.Errorf("report %+v", rep)
	}
	if errs := formats.Verify(out); len(errs) > 0 {
		t.Fatalf("imported bundle does not verify: %v", errs)
	}
	files, as, _ := readAll(t, out)
	if len(files) != 2 || len(as) != 2 || as[1].FileID != files[1].ID || as[1].FirstPage != 10 || as[0].NPages != 2 || as[0].Kind != formats.KindImported {
		t.Errorf("files %+v accesses %+v", files, as)
	}
	m := manifestOf(t, out)
	if m.Recording.Source != "import:fio" || m.Host.PageSize != 4096 || m.Counters.Events != 2 || len(m.Notes) == 0 {
		t.Errorf("manifest %+v", m)
	}
	// A bad input leaves no bundle behind and names the file and field.
	bad := writeTemp(t, "bad.log", "fio version 3 iolog\n5 /d/a read x 8192\n")
	out2 := filepath.Join(t.TempDir(), "bad")
	_, err = Import(bad, out2, ImportOptions{From: "fio"})
	if err == nil || !strings.Contains(err.Error(), bad+":2: field offset") {
		t.Errorf("error %v, want one naming %s:2 and field offset", err, bad)
	}
	if _, err := os.Stat(out2); !os.IsNotExist(err) {
		t.Errorf("failed import left %s behind", out2)
	}
	if _, err := Import(bad, out2, ImportOptions{From: "tar"}); !errors.Is(err, ErrUsage) {
		t.Errorf("--from tar: %v, want usage error", err)
	}
}

func TestAnonymize(t *testing.T) {
	spec := sample()
	dir := makeBundle(t, spec)
	out := filepath.Join(t.TempDir(), "anon")
	if _, err := Anonymize(dir, out, AnonymizeOptions{Salt: "s1", Comm: true}); err != nil {
		t.Fatal(err)
	}
	if errs := formats.Verify(out); len(errs) > 0 {
		t.Fatalf("anonymized bundle does not verify: %v", errs)
	}
	files, as, hs := readAll(t, out)
	an, _ := NewAnonymizer("s1")
	for i, f := range files {
		in := spec.files[i]
		if f.Path != an.Path(in.Path) || strings.Contains(f.Path, "alice") || f.Ino != in.Ino || f.Dev != in.Dev || f.Size != in.Size || f.ID != in.ID {
			t.Errorf("file %d: %+v from %+v", i, f, in)
		}
	}
	if !strings.HasSuffix(files[0].Path, ".sqlite") || strings.Count(files[0].Path, "/") != 4 {
		t.Errorf("path %q: want extension and depth kept", files[0].Path)
	}
	if len(as) != len(spec.accesses) || len(hs) != 2 {
		t.Fatalf("%d accesses %d hints", len(as), len(hs))
	}
	for i := range as {
		want := spec.accesses[i]
		want.Comm = an.Comm(want.Comm)
		if as[i] != want {
			t.Fatalf("access %d: %+v, want %+v", i, as[i], want)
		}
	}
	if !reflect.DeepEqual(hs, spec.hints) {
		t.Errorf("hints changed: %+v", hs)
	}
	m := manifestOf(t, out)
	js, _ := json.Marshal(m)
	for _, leak := range []string{"alice", "secret-host", "sqlite3", "run.sh"} {
		if bytes.Contains(js, []byte(leak)) {
			t.Errorf("manifest leaks %q: %s", leak, js)
		}
	}
	if m.Counters.DroppedEvents != 7 || !m.Start.Wall.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("manifest lost counters or start: %+v", m)
	}
	// Without --comm, comm is kept.
	out2 := filepath.Join(t.TempDir(), "anon2")
	if _, err := Anonymize(dir, out2, AnonymizeOptions{}); err != nil {
		t.Fatal(err)
	}
	_, as2, _ := readAll(t, out2)
	if as2[0].Comm != "sqlite3" {
		t.Errorf("comm = %q without --comm", as2[0].Comm)
	}
}

func TestMerge(t *testing.T) {
	a := bundleSpec{
		files: []formats.File{{ID: 0, Dev: 1, Ino: 5, Path: "/x/a"}, {ID: 1, Path: "/x/only-path", Mode: formats.ModeRegular}},
		accesses: []formats.Access{
			{TS: 10, FileID: 0, NPages: 1, Kind: formats.KindRead},
			{TS: 30, FileID: 1, NPages: 1, Kind: formats.KindRead},
		},
		hints: []formats.Hint{{TS: 15, FileID: 1, Kind: formats.HintCustom, Name: "a"}},
	}
	b := bundleSpec{
		files: []formats.File{{ID: 7, Dev: 1, Ino: 5, Path: "/renamed/a"}, {ID: 8, Path: "/x/only-path", Mode: formats.ModeRegular}, {ID: 9, Dev: 1, Ino: 6, Path: "/x/c"}},
		accesses: []formats.Access{
			{TS: 20, FileID: 7, FirstPage: 2, NPages: 1, Kind: formats.KindFault},
			{TS: 25, FileID: 9, NPages: 1, Kind: formats.KindRead},
			{TS: 40, FileID: 8, NPages: 1, Kind: formats.KindRead},
		},
		hints: []formats.Hint{{TS: 5, FileID: 9, Kind: formats.HintCustom, Name: "b"}},
		edit:  func(m *formats.Manifest) { m.Host.Hostname = "other" },
	}
	da, db := makeBundle(t, a), makeBundle(t, b)
	out := filepath.Join(t.TempDir(), "merged")
	rep, err := Merge(out, []string{da, db})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 3 || rep.Unified != 2 || rep.Events != 5 || rep.Hints != 2 {
		t.Errorf("report %+v", rep)
	}
	if errs := formats.Verify(out); len(errs) > 0 {
		t.Fatalf("merged bundle does not verify: %v", errs)
	}
	files, as, hs := readAll(t, out)
	byPath := map[string]uint32{}
	for _, f := range files {
		byPath[f.Path] = f.ID
	}
	var got []string
	for _, x := range as {
		got = append(got, strings.TrimPrefix(filesPath(files, x.FileID), "/x/")+"@"+itoa(x.TS))
	}
	if want := []string{"a@10", "a@20", "c@25", "only-path@30", "only-path@40"}; !reflect.DeepEqual(got, want) {
		t.Errorf("merged accesses %v, want %v", got, want)
	}
	if len(hs) != 2 || hs[0].Name != "b" || hs[0].FileID != byPath["/x/c"] || hs[1].FileID != byPath["/x/only-path"] {
		t.Errorf("merged hints %+v", hs)
	}
	m := manifestOf(t, out)
	if m.Counters.DroppedEvents != 14 || m.Counters.DroppedHints != 6 || m.Recording.Source != "merge" || !strings.Contains(strings.Join(m.Notes, "\n"), db) || !strings.Contains(strings.Join(m.Notes, "\n"), "another host") {
		t.Errorf("manifest %+v", m)
	}
	if _, err := Merge(filepath.Join(t.TempDir(), "x"), nil); !errors.Is(err, ErrUsage) {
		t.Errorf("merge without inputs: %v", err)
	}
}

func filesPath(files []formats.File, id uint32) string {
	for _, f := range files {
		if f.ID == id {
			return f.Path
		}
	}
	return "?"
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

func TestSlice(t *testing.T) {
	spec := sample() // accesses every 1 µs from ts 1 s, manifest start = first access
	dir := makeBundle(t, spec)
	for _, tc := range []struct {
		from, to        string
		events, hints   uint64
		firstTS, lastTS uint64
	}{
		{"", "", 2500, 2, 1_000_000_000, 1_002_499_000},
		{"", "1ms", 1000, 1, 1_000_000_000, 1_000_999_000},
		{"1ms", "1.5ms", 500, 0, 1_001_000_000, 1_001_499_000},
		{"1002000000", "", 500, 1, 1_002_000_000, 1_002_499_000},
		{"2ms", "1002100000", 100, 1, 1_002_000_000, 1_002_099_000},
	} {
		from, err := ParseBound(tc.from)
		if err != nil {
			t.Fatal(err)
		}
		to, err := ParseBound(tc.to)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "s")
		rep, err := Slice(dir, out, from, to)
		if err != nil {
			t.Fatalf("%s..%s: %v", tc.from, tc.to, err)
		}
		if errs := formats.Verify(out); len(errs) > 0 {
			t.Fatalf("%s..%s: sliced bundle does not verify: %v", tc.from, tc.to, errs)
		}
		files, as, hs := readAll(t, out)
		if rep.Events != tc.events || uint64(len(as)) != tc.events || uint64(len(hs)) != tc.hints || len(files) != 3 {
			t.Errorf("%s..%s: %d events %d hints (report %+v), want %d %d", tc.from, tc.to, len(as), len(hs), rep, tc.events, tc.hints)
			continue
		}
		if as[0].TS != tc.firstTS || as[len(as)-1].TS != tc.lastTS {
			t.Errorf("%s..%s: ts %d..%d, want %d..%d", tc.from, tc.to, as[0].TS, as[len(as)-1].TS, tc.firstTS, tc.lastTS)
		}
	}
	if _, err := Slice(dir, filepath.Join(t.TempDir(), "e"), Bound{Set: true, NS: 5}, Bound{Set: true, NS: 5}); !errors.Is(err, ErrUsage) {
		t.Errorf("empty window: %v, want usage error", err)
	}
}

func TestRepair(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "killed")
	w, err := formats.Create(dir, formats.WithBatchRows(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(formats.File{ID: 0, Path: "/f", Mode: formats.ModeRegular}); err != nil {
		t.Fatal(err)
	}
	a := formats.Access{NPages: 1, Kind: formats.KindRead}
	for i := 0; i < 250; i++ {
		a.TS = uint64(i)
		if err := w.Append(&a); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// Rows after the last flush are lost, as after SIGKILL: never Close.
	for i := 250; i < 260; i++ {
		a.TS = uint64(i)
		w.Append(&a)
	}
	if errs := formats.Verify(dir); len(errs) == 0 {
		t.Fatal("unfinished bundle verifies; want problems before repair")
	}
	rep, err := Repair(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tables[formats.AccessesFile] != 250 {
		t.Errorf("repair report %+v, want 250 accesses recovered", rep)
	}
	if errs := formats.Verify(dir); len(errs) > 0 {
		t.Fatalf("repaired bundle does not verify: %v", errs)
	}
	s, err := Info(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.Events != 250 || s.Complete {
		t.Errorf("repaired: %d events, complete %v; want 250, false", s.Events, s.Complete)
	}
}

func TestSynthOptions(t *testing.T) {
	if err := Synth(filepath.Join(t.TempDir(), "x"), formats.SynthSpec{Pattern: "zigzag"}); !errors.Is(err, ErrUsage) {
		t.Errorf("bad pattern: %v, want usage error", err)
	}
	dir := filepath.Join(t.TempDir(), "seq")
	if err := Synth(dir, formats.SynthSpec{Pattern: "seq", Events: 5000, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := Info(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Events != 5000 {
		t.Errorf("synth seq: %d events, want 5000", s.Events)
	}
}
