package formats

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
)

type rows struct {
	files    []File
	accesses []Access
	hints    []Hint
}

func randomRows(r *rand.Rand, nf, na, nh int) rows {
	var out rows
	for i := 0; i < nf; i++ {
		out.files = append(out.files, File{ID: uint32(i + 1), Dev: r.Uint64(), Ino: r.Uint64(), Path: fmt.Sprintf("/data/ü%d/%s", i, strings.Repeat("x", r.Intn(20))), Size: r.Uint64(), MtimeNS: r.Int63() - r.Int63(), Mode: r.Uint32()})
	}
	comms := []string{"postgres", "", "kworker/0:1", "日本語"}
	for i := 0; i < na; i++ {
		out.accesses = append(out.accesses, Access{TS: r.Uint64(), PID: r.Uint32(), TID: r.Uint32(), Comm: comms[r.Intn(len(comms))] + fmt.Sprint(r.Intn(3)), FileID: r.Uint32(), FirstPage: r.Uint64(), NPages: r.Uint32(), Kind: AccessKind(r.Intn(256)),
			EndNS: r.Uint64(), Op: r.Uint64(), Ret: r.Int63() - r.Int63(), Prot: uint8(r.Intn(256)), MapFirstPage: r.Uint64(), MapPages: r.Uint64()})
	}
	for i := 0; i < nh; i++ {
		sources := []string{"", HintSourceApp, HintSourceAdapter + "sqlite", HintSourceAdapter + "gguf"}
		h := Hint{TS: r.Uint64(), PID: r.Uint32(), Kind: HintKind(r.Intn(7)), FileID: r.Uint32(), ParentPage: r.Uint64(), Position: r.Uint32(), Name: strings.Repeat("n", r.Intn(5)), OffsetBytes: r.Uint64(), LengthBytes: r.Uint64(),
			TID: r.Uint32(), Source: sources[r.Intn(len(sources))]}
		for j := r.Intn(5); j > 0; j-- {
			h.Children = append(h.Children, r.Uint64())
		}
		out.hints = append(out.hints, h)
	}
	return out
}

func writeRows(t testing.TB, dir string, in rows, opts ...WriterOption) {
	t.Helper()
	w, err := Create(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range in.files {
		if err := w.AddFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range in.accesses {
		if err := w.Append(&in.accesses[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range in.hints {
		if err := w.AppendHint(&in.hints[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func readRows(t testing.TB, dir string) rows {
	t.Helper()
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var out rows
	if out.files, err = b.Files(); err != nil {
		t.Fatal(err)
	}
	ac, err := b.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	for ac.Next() {
		out.accesses = append(out.accesses, *ac.At())
	}
	if err := ac.Err(); err != nil {
		t.Fatal(err)
	}
	ac.Close()
	hc, err := b.Hints()
	if err != nil {
		t.Fatal(err)
	}
	for hc.Next() {
		h := *hc.At()
		h.Children = append([]uint64(nil), h.Children...)
		out.hints = append(out.hints, h)
	}
	if err := hc.Err(); err != nil {
		t.Fatal(err)
	}
	hc.Close()
	return out
}

func normalize(r rows) rows {
	for i := range r.hints {
		if len(r.hints[i].Children) == 0 {
			r.hints[i].Children = nil
		}
	}
	return r
}

func equalRows(t *testing.T, got, want rows) {
	t.Helper()
	got, want = normalize(got), normalize(want)
	if len(got.files) != len(want.files) || len(got.accesses) != len(want.accesses) || len(got.hints) != len(want.hints) {
		t.Fatalf("row counts: got %d/%d/%d, want %d/%d/%d", len(got.files), len(got.accesses), len(got.hints), len(want.files), len(want.accesses), len(want.hints))
	}
	if !reflect.DeepEqual(got.files, want.files) {
		t.Fatalf("files differ")
	}
	for i := range want.accesses {
		if got.accesses[i] != want.accesses[i] {
			t.Fatalf("access %d: got %+v, want %+v", i, got.accesses[i], want.accesses[i])
		}
	}
	for i := range want.hints {
		if !reflect.DeepEqual(got.hints[i], want.hints[i]) {
			t.Fatalf("hint %d: got %+v, want %+v", i, got.hints[i], want.hints[i])
		}
	}
}

func TestRoundTripAllKinds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	var in rows
	in.files = []File{{ID: 1, Dev: KernelDev(0x803), Ino: 12, Path: "/var/lib/db", Size: 1 << 30, MtimeNS: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano(), Mode: ModeRegular | 0o644}, {ID: 2, Path: "/missing"}}
	for k := KindRead; k <= KindImported; k++ {
		in.accesses = append(in.accesses, Access{TS: uint64(k) * 1000, PID: 7, TID: 8, Comm: "db" + k.String(), FileID: 1, FirstPage: uint64(k) * 3, NPages: 2, Kind: k})
	}
	for k := HintTreeChildEnter; k <= HintCustom; k++ {
		in.hints = append(in.hints, Hint{TS: uint64(k), PID: 7, Kind: k, FileID: 1, ParentPage: 9, Position: 2, Children: []uint64{10, 11, 12}, Name: k.String(), OffsetBytes: 4096, LengthBytes: 8192})
	}
	writeRows(t, dir, in)
	equalRows(t, readRows(t, dir), in)
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest()
	if !m.Complete || m.FormatVersion != FormatVersion || m.Counters.Events != uint64(len(in.accesses)) || m.Counters.Hints != 4 || m.Counters.Files != 2 {
		t.Fatalf("manifest: %+v", m)
	}
	for _, name := range []string{FilesFile, AccessesFile, HintsFile} {
		if m.Tables[name].SHA256 == "" || m.Tables[name].Bytes == 0 {
			t.Fatalf("manifest table %s: %+v", name, m.Tables[name])
		}
	}
	if _, err := os.Stat(filepath.Join(dir, PartialManifestFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("provisional manifest left behind: %v", err)
	}
	if errs := Verify(dir); len(errs) != 0 {
		t.Fatalf("verify: %v", errs)
	}
}

// TestArrowGoReadsBundle checks the files with an independent reader.
func TestArrowGoReadsBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	in := randomRows(rand.New(rand.NewSource(3)), 5, 1000, 50)
	writeRows(t, dir, in, WithBatchRows(300), AllowUnknownFiles())
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.OpenTable(AccessesFile)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if tb.NumBatches() != 4 {
		t.Fatalf("batches = %d, want 4", tb.NumBatches())
	}
	if md, _ := tb.Schema().Metadata().GetValue(MetaFormatVersion); md != FormatVersion {
		t.Fatalf("schema metadata version %q", md)
	}
	row := 0
	for i := 0; i < tb.NumBatches(); i++ {
		rec, err := tb.Batch(i)
		if err != nil {
			t.Fatal(err)
		}
		ts := rec.Column(0).(*array.Uint64)
		comm := rec.Column(3).(*array.Dictionary)
		dict := comm.Dictionary().(*array.String)
		pages := rec.Column(5).(*array.Uint64)
		for j := 0; j < int(rec.NumRows()); j++ {
			a := in.accesses[row]
			if ts.Value(j) != a.TS || pages.Value(j) != a.FirstPage || dict.Value(comm.GetValueIndex(j)) != a.Comm {
				t.Fatalf("row %d differs via arrow-go", row)
			}
			row++
		}
		rec.Release()
	}
	if row != len(in.accesses) {
		t.Fatalf("arrow-go read %d rows, want %d", row, len(in.accesses))
	}
	ht, err := b.OpenTable(HintsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer ht.Close()
	rec, err := ht.Batch(0)
	if err != nil {
		t.Fatal(err)
	}
	ch := rec.Column(6).(*array.List)
	if got := ch.Len(); got != 50 {
		t.Fatalf("hints batch rows %d", got)
	}
	rec.Release()
}

func TestPropertyRoundTrip(t *testing.T) {
	for seed := int64(0); seed < 12; seed++ {
		r := rand.New(rand.NewSource(seed))
		in := randomRows(r, r.Intn(50), r.Intn(3000), r.Intn(300))
		dir := filepath.Join(t.TempDir(), "b")
		bs := 1 + r.Intn(700)
		writeRows(t, dir, in, WithBatchRows(bs), AllowUnknownFiles())
		equalRows(t, readRows(t, dir), in)
	}
}
