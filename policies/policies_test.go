package policies

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
)

func mustBuild(t *testing.T, spec string, env Env) Policy {
	t.Helper()
	p, err := Build(spec, env)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pagesOf(reqs []Request) []uint64 {
	var out []uint64
	for _, r := range reqs {
		for _, rg := range r.Ranges {
			for i := range uint64(rg.N) {
				out = append(out, rg.First+i)
			}
		}
	}
	return out
}

func treeEvent(ts uint64, children ...uint64) *Event {
	return &Event{Kind: EventTreeChildEnter, TS: ts, File: 2, Tree: TreeChildEnter{Children: children}}
}

func TestTreeWindowAndTTL(t *testing.T) {
	p := mustBuild(t, "tree:window=3,ttl=100ms", Env{FilePages: func(uint32) uint64 { return 1000 }})
	var got []Request
	p.Handle(treeEvent(0, 50, 10, 30, 70), collect(&got))
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{10, 30, 50}) {
		t.Fatalf("window 3: got %v", pg)
	}
	got = nil
	// 10 and 30 were requested 50ms ago: suppressed; 70 is new.
	p.Handle(treeEvent(50e6, 10, 30, 70), collect(&got))
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{70}) {
		t.Fatalf("TTL: got %v", pg)
	}
	got = nil
	// 140ms after the first request, 10 and 30 may be requested again;
	// 70 (requested at 50ms) is still suppressed. 2000 is beyond EOF.
	p.Handle(treeEvent(140e6, 10, 30, 70), collect(&got))
	p.Handle(treeEvent(140e6, 2000), collect(&got))
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{10, 30}) {
		t.Fatalf("TTL expiry / EOF: got %v", pg)
	}
}

// TestTreeScan: a cursor scanning the 8 children (pages 100..107) of one
// node sends a hint as it enters each child, listing the children after it
// (docs/hints.md). With window 4 the first hint requests the next 4
// children; each later hint adds the one child that came into the window,
// and the TTL keeps the others from being requested twice. The first child
// is never upcoming, and the last hint lists nothing.
func TestTreeScan(t *testing.T) {
	p := mustBuild(t, "tree:window=4,ttl=1s", Env{FilePages: func(uint32) uint64 { return 1000 }})
	kids := []uint64{100, 101, 102, 103, 104, 105, 106, 107}
	var want [][]uint64
	want = append(want, []uint64{101, 102, 103, 104}, []uint64{105}, []uint64{106}, []uint64{107}, nil, nil, nil, nil)
	for i := range kids {
		var got []Request
		ev := &Event{Kind: EventTreeChildEnter, TS: uint64(i) * 1e6, File: 2, Tree: TreeChildEnter{ParentPage: 7, Position: uint32(i), Children: kids[i+1:]}}
		p.Handle(ev, collect(&got))
		if pg := pagesOf(got); !slices.Equal(pg, want[i]) {
			t.Errorf("entering child %d: requested %v, want %v", i, pg, want[i])
		}
	}
}

func TestTensorExtents(t *testing.T) {
	p := mustBuild(t, "tensor:chunk=2", Env{FilePages: func(uint32) uint64 { return 4 }})
	ev := &Event{Kind: EventTensorLayout, File: 3, Tensor: TensorLayout{Name: "blk.0.attn", Offset: 5000, Length: 10000}}
	var got []Request
	p.Handle(ev, collect(&got))
	// bytes [5000, 15000) are pages 1..3, in chunks of at most 2 pages.
	if len(got) != 2 || !slices.Equal(pagesOf(got), []uint64{1, 2, 3}) || got[0].Pages() != 2 {
		t.Fatalf("got %+v", got)
	}
	got = nil
	p.Handle(ev, collect(&got)) // repeated extent
	ev2 := *ev
	ev2.Tensor.Length = 0
	p.Handle(&ev2, collect(&got)) // empty
	if len(got) != 0 {
		t.Fatalf("repeated or empty extent emitted %+v", got)
	}
	ev3 := *ev
	ev3.Tensor.Name, ev3.Tensor.Offset, ev3.Tensor.Length = "big", 8192, 1<<40
	p.Handle(&ev3, collect(&got)) // clipped at EOF (4 pages)
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{2, 3}) {
		t.Fatalf("EOF clip: got %v", pg)
	}
}

func access(file uint32, page uint64, n uint32) *Event {
	return &Event{Kind: EventFileAccess, File: file, Access: FileAccess{Kind: formats.KindRead, Page: page, NPages: n}}
}

func TestStride(t *testing.T) {
	p := mustBuild(t, "stride:confidence=2,lookahead=3", Env{FilePages: func(uint32) uint64 { return 65 }})
	var got []Request
	for _, pg := range []uint64{0, 10, 20} {
		p.Handle(access(1, pg, 1), collect(&got))
	}
	if len(got) != 0 {
		t.Fatalf("predicted before confidence: %+v", got)
	}
	p.Handle(access(1, 30, 1), collect(&got))
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{40, 50, 60}) {
		t.Fatalf("after 3 equal strides: got %v", pg)
	}
	got = nil
	p.Handle(access(1, 40, 1), collect(&got)) // 70 is beyond EOF
	if len(got) != 0 {
		t.Fatalf("re-predicted or beyond EOF: %v", pagesOf(got))
	}
	// Sequential access (stride within the access size) is left to
	// readahead; a backward stride is predicted.
	got = nil
	for _, pg := range []uint64{100, 104, 108, 112} {
		p.Handle(access(2, pg, 4), collect(&got))
	}
	for _, pg := range []uint64{50, 40, 30, 20} {
		p.Handle(access(3, pg, 2), collect(&got))
	}
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{0, 1, 10, 11}) {
		t.Fatalf("sequential/backward: got %v", pg)
	}
}

func TestOracle(t *testing.T) {
	fut := NewFuture([]FutureAccess{{1, 0, 1}, {1, 5, 1}, {2, 7, 1}, {1, 5, 1}, {1, 9, 2}, {2, 1, 1}})
	p := mustBuild(t, "oracle:n=2", Env{Future: fut})
	var got []Request
	p.Handle(access(1, 0, 1), collect(&got))
	// next 2 distinct pages after access 0: (1,5), (2,7)
	if len(got) != 2 || got[0].File != 1 || got[1].File != 2 || !slices.Equal(pagesOf(got), []uint64{5, 7}) {
		t.Fatalf("first: %+v", got)
	}
	got = nil
	p.Handle(access(1, 5, 1), collect(&got))
	// window after access 1: (2,7), (1,5) again -> (1,5) enters anew.
	if !slices.Equal(pagesOf(got), []uint64{5}) {
		t.Fatalf("second: %+v", got)
	}
	got = nil
	p.Handle(access(9, 99, 1), collect(&got)) // not in the future: ignored
	if len(got) != 0 {
		t.Fatalf("unknown access emitted %+v", got)
	}
	// Per-file scope: the next 2 pages of file 1 only.
	p = mustBuild(t, "oracle:n=2,scope=file", Env{Future: fut})
	got = nil
	p.Handle(access(1, 0, 1), collect(&got))
	if len(got) != 1 || got[0].File != 1 || !slices.Equal(pagesOf(got), []uint64{5, 9}) {
		t.Fatalf("per-file: %+v", got)
	}
}

func key(path string) FileKey { return FileKey{Path: path, Size: 1 << 20, MtimeNS: 42} }

func trainedModel(t *testing.T) *MarkovModel {
	b := NewMarkovBuilder(4096)
	for run := range 3 {
		b.AddRun(run, key("/lib/a.so"), []uint64{0, 17, 3, 200, 3, 9})
	}
	b.AddRun(3, key("/lib/a.so"), []uint64{0, 17, 5})
	return b.Build()
}

func TestMarkovBuilder(t *testing.T) {
	m := trainedModel(t)
	if m.Runs != 4 {
		t.Errorf("Runs = %d", m.Runs)
	}
	fm, err := m.Lookup(key("/lib/a.so"))
	if err != nil || fm == nil {
		t.Fatalf("Lookup: %v %v", fm, err)
	}
	next := fm.Next(17)
	if len(next) != 2 || next[0].Next != 3 || math.Abs(next[0].P-0.75) > 1e-12 || next[1].Next != 5 {
		t.Fatalf("Next(17) = %+v", next)
	}
	next = fm.Next(3) // 3 -> 200 (3 times), 3 -> 9 (3 times): ties by page
	if len(next) != 2 || next[0].Next != 9 || next[1].Next != 200 {
		t.Fatalf("Next(3) = %+v", next)
	}
	if _, err := m.Lookup(FileKey{Path: "/lib/a.so", Size: 1 << 20, MtimeNS: 43}); !errors.Is(err, ErrFileChanged) {
		t.Fatalf("changed mtime: %v", err)
	}
	if fm, err := m.Lookup(key("/other")); fm != nil || err != nil {
		t.Fatalf("unknown file: %v %v", fm, err)
	}
	b := NewMarkovBuilder(0)
	b.AddRun(0, FileKey{Path: "/x", Size: 1}, []uint64{0, 0})
	b.AddRun(1, FileKey{Path: "/x", Size: 2}, []uint64{0, 0})
	if len(b.Warnings()) != 1 || !strings.Contains(b.Warnings()[0], "/x") {
		t.Fatalf("warnings %v", b.Warnings())
	}
}

func markovEnv(m *MarkovModel, warns *[]string) Env {
	return Env{
		Markov:    m,
		FilePages: func(uint32) uint64 { return 256 },
		FileKey: func(f uint32) (FileKey, bool) {
			switch f {
			case 1:
				return key("/lib/a.so"), true
			case 2:
				return FileKey{Path: "/lib/a.so", Size: 1 << 20, MtimeNS: 1}, true
			}
			return FileKey{}, false
		},
		Warn: func(s string) { *warns = append(*warns, s) },
	}
}

func TestMarkovPolicyWalk(t *testing.T) {
	var warns []string
	env := markovEnv(trainedModel(t), &warns)
	p := mustBuild(t, "markov:depth=4,threshold=0", env)
	var got []Request
	p.Handle(access(1, 0, 1), collect(&got))
	// Deterministic: 0 -> 17 -> 3 -> 9 (9 has no successors). 200 (beyond
	// EOF 256? no, it is within) is not on the most likely path.
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{3, 9, 17}) {
		t.Fatalf("walk from 0: got %v", pg)
	}
	got = nil
	p.Handle(access(1, 17, 1), collect(&got)) // all already seen
	if len(got) != 0 {
		t.Fatalf("re-emitted seen pages: %v", pagesOf(got))
	}
	// The threshold stops the walk: 0->17 has p=1, 17->3 has p=0.75.
	p = mustBuild(t, "markov:threshold=0.8", env)
	got = nil
	p.Handle(access(1, 0, 1), collect(&got))
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{17}) {
		t.Fatalf("threshold 0.8: got %v", pg)
	}
	// A changed file is ignored with a warning.
	got = nil
	p.Handle(access(2, 0, 1), collect(&got))
	if len(got) != 0 || len(warns) != 1 || !strings.Contains(warns[0], "changed") {
		t.Fatalf("changed file: got %v, warnings %v", pagesOf(got), warns)
	}
}

func TestMarkovRandomWalkSeeded(t *testing.T) {
	var warns []string
	run := func(seed string) []uint64 {
		p := mustBuild(t, "markov:mode=random,threshold=0,depth=8,seed="+seed, markovEnv(trainedModel(t), &warns))
		var got []Request
		for range 5 {
			p.Handle(access(1, 0, 1), collect(&got))
		}
		return pagesOf(got)
	}
	a, b := run("7"), run("7")
	if !slices.Equal(a, b) || len(a) == 0 {
		t.Fatalf("same seed, different walks: %v vs %v", a, b)
	}
	for _, pg := range a {
		if !slices.Contains([]uint64{17, 3, 5, 9, 200}, pg) {
			t.Fatalf("random walk emitted untrained page %d", pg)
		}
	}
}

func TestMarkovSaveLoad(t *testing.T) {
	m := trainedModel(t)
	var buf bytes.Buffer
	if err := m.Save(&buf); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	m2, err := Load(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	f1, _ := m.Lookup(key("/lib/a.so"))
	f2, _ := m2.Lookup(key("/lib/a.so"))
	if m2.Runs != m.Runs || m2.PageSize != 4096 || f2 == nil || f2.States() != f1.States() || !slices.Equal(f1.Next(17), f2.Next(17)) {
		t.Fatalf("round trip differs")
	}
	var again bytes.Buffer
	m2.Save(&again)
	if !bytes.Equal(again.Bytes(), data) {
		t.Fatal("Save is not deterministic")
	}

	corrupt := func(name string, mutate func([]byte) []byte, want string) {
		t.Helper()
		b := mutate(slices.Clone(data))
		_, err := Load(bytes.NewReader(b))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", name, err, want)
		}
	}
	// Re-seal a mutated body with a valid checksum so the field check,
	// not the checksum, reports it.
	reseal := func(b []byte) []byte {
		body := b[:len(b)-4]
		var w bytes.Buffer
		w.Write(body)
		binary.Write(&w, binary.LittleEndian, crcIEEE(body))
		return w.Bytes()
	}
	corrupt("magic", func(b []byte) []byte { b[0] = 'X'; return b }, "not a predictio markov model")
	corrupt("version", func(b []byte) []byte { b[8] = 9; return reseal(b) }, "version 9 is not supported")
	corrupt("truncated", func(b []byte) []byte { return b[:len(b)/2] }, "unexpected EOF")
	corrupt("checksum", func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }, "checksum")
	corrupt("trailing", func(b []byte) []byte { return append(b, 0) }, "trailing data")
	// The last transition probability is the last 8 bytes before the CRC.
	probAt := len(data) - 4 - 8
	corrupt("probability sum", func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[probAt:], math.Float64bits(0.5))
		return reseal(b)
	}, "sum to")
	corrupt("probability NaN", func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[probAt:], math.Float64bits(math.NaN()))
		return reseal(b)
	}, "not in (0, 1]")
	corrupt("page beyond EOF", func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[probAt-8:], 1<<40)
		return reseal(b)
	}, "beyond end of file")
	corrupt("huge nfiles", func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[20:], math.MaxUint32)
		return reseal(b)
	}, "nfiles")
	if _, err := Load(strings.NewReader("")); !strings.Contains(err.Error(), "magic") {
		t.Errorf("empty input: %v", err)
	}
}

func TestDispatcherRouting(t *testing.T) {
	tree := mustBuild(t, "tree:ttl=0s", Env{})
	tensor := mustBuild(t, "tensor", Env{})
	d := NewDispatcher(tree, tensor)
	var got []Request
	d.Dispatch(treeEvent(0, 4), collect(&got))
	d.Dispatch(&Event{Kind: EventTensorLayout, File: 5, Tensor: TensorLayout{Name: "t", Offset: 0, Length: 4096}}, collect(&got))
	d.Dispatch(&Event{Kind: EventLayerStart}, collect(&got))
	d.Dispatch(&Event{Kind: 0}, collect(&got))
	d.Dispatch(&Event{Kind: 200}, collect(&got))
	if len(got) != 2 || got[0].File != 2 || got[1].File != 5 {
		t.Fatalf("got %+v", got)
	}
	if d.Events != 5 || d.Unrouted != 3 || len(d.Policies()) != 2 {
		t.Fatalf("Events %d Unrouted %d", d.Events, d.Unrouted)
	}
}

// TestNoPageBeyondEOF feeds every policy random events and checks that no
// emitted page is at or beyond end of file and every request is
// normalized and bounded.
func TestNoPageBeyondEOF(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	eofs := map[uint32]uint64{1: 1, 2: 37, 3: 300, 4: 5000}
	var fut []FutureAccess
	for range 3000 {
		f := uint32(1 + rng.IntN(4))
		fut = append(fut, FutureAccess{File: f, Page: uint64(rng.IntN(int(eofs[f]))), NPages: uint32(1 + rng.IntN(3))})
	}
	b := NewMarkovBuilder(0)
	for f := uint32(1); f <= 4; f++ {
		var seq []uint64
		for range 500 {
			seq = append(seq, uint64(rng.IntN(int(eofs[f])+20))) // some beyond EOF
		}
		b.AddRun(0, FileKey{Path: string(rune('a' + f))}, seq)
	}
	env := Env{
		MaxPages:  16,
		FilePages: func(f uint32) uint64 { return eofs[f] },
		FileKey:   func(f uint32) (FileKey, bool) { return FileKey{Path: string(rune('a' + f))}, true },
		Future:    NewFuture(fut),
		Markov:    b.Build(),
	}
	for _, spec := range []string{"readahead", "readahead:folios=small,kb=64", "markov", "markov:mode=random", "tree:window=64", "tensor", "stride:confidence=1", "oracle:n=40", "oracle:n=40,scope=file"} {
		p := mustBuild(t, spec, env)
		emitted := 0
		emit := func(r *Request) {
			emitted++
			if !r.Valid(16) {
				t.Fatalf("%s: request not normalized or over 16 pages: %+v", spec, r.Ranges)
			}
			for _, rg := range r.Ranges {
				if rg.First+uint64(rg.N) > eofs[r.File] {
					t.Fatalf("%s: file %d: range %+v beyond EOF %d", spec, r.File, rg, eofs[r.File])
				}
			}
		}
		for i := range 3000 {
			a := fut[i]
			ev := &Event{Kind: EventFileAccess, TS: uint64(i) * 1000, File: a.File,
				Access: FileAccess{Kind: []formats.AccessKind{formats.KindRead, formats.KindFault, formats.KindMap}[rng.IntN(3)], Page: a.Page, NPages: a.NPages}}
			if strings.HasPrefix(spec, "stride") && i%2 == 0 {
				ev.Access.Page = uint64(i) * 7 % (eofs[a.File] + 10)
			}
			if p.Accepts(EventFileAccess) {
				p.Handle(ev, emit)
			}
			var children []uint64
			for range rng.IntN(10) {
				children = append(children, uint64(rng.IntN(int(eofs[a.File])+50)))
			}
			tev := &Event{Kind: EventTreeChildEnter, TS: uint64(i), File: a.File, Tree: TreeChildEnter{Children: children}}
			if p.Accepts(EventTreeChildEnter) {
				p.Handle(tev, emit)
			}
			xev := &Event{Kind: EventTensorLayout, File: a.File, Tensor: TensorLayout{Name: "t", Offset: uint64(rng.IntN(1 << 24)), Length: uint64(rng.IntN(1 << 20))}}
			if p.Accepts(EventTensorLayout) {
				p.Handle(xev, emit)
			}
		}
		if emitted == 0 {
			t.Errorf("%s emitted nothing: the property was not exercised", spec)
		}
	}
}

func crcIEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

func TestEventsFromRows(t *testing.T) {
	var ev Event
	ev.FromAccess(&formats.Access{TS: 5, PID: 1, TID: 2, FileID: 3, FirstPage: 9, NPages: 4, Kind: formats.KindFault})
	if ev.Kind != EventFileAccess || ev.File != 3 || ev.Access.Page != 9 || ev.Access.NPages != 4 || ev.Access.Kind != formats.KindFault || ev.TS != 5 {
		t.Fatalf("FromAccess: %+v", ev)
	}
	ev.FromAccess(&formats.Access{FileID: 3, FirstPage: 9, NPages: 1, Kind: formats.KindFault,
		Prot: formats.ProtRead | formats.ProtExec, MapFirstPage: 4, MapPages: 100, Op: 77})
	if a := ev.Access; a.Prot != formats.ProtRead|formats.ProtExec || a.MapFirst != 4 || a.MapPages != 100 || a.Op != 77 {
		t.Fatalf("FromAccess of a 1.1 fault row: %+v", a)
	}
	if !ev.FromHint(&formats.Hint{Kind: formats.HintTreeChildEnter, FileID: 2, ParentPage: 1, Position: 3, Children: []uint64{7, 8}}) ||
		ev.Kind != EventTreeChildEnter || ev.Tree.Position != 3 || len(ev.Tree.Children) != 2 || ev.Access.Page != 0 {
		t.Fatalf("FromHint tree: %+v", ev)
	}
	if !ev.FromHint(&formats.Hint{Kind: formats.HintTensorLayout, Name: "w", OffsetBytes: 4096, LengthBytes: 10}) || ev.Tensor.Offset != 4096 || ev.Tensor.Name != "w" {
		t.Fatalf("FromHint tensor: %+v", ev)
	}
	if !ev.FromHint(&formats.Hint{Kind: formats.HintLayerStart, Position: 6}) || ev.Kind != EventLayerStart || ev.Layer.Index != 6 {
		t.Fatalf("FromHint layer: %+v", ev)
	}
	if ev.FromHint(&formats.Hint{Kind: formats.HintCustom}) {
		t.Fatal("custom hint has an event")
	}
	if PagesOf(0, 0) != 0 || PagesOf(1, 0) != 1 || PagesOf(8192, 4096) != 2 || PagesOf(8193, 4096) != 3 {
		t.Fatal("PagesOf")
	}
	if k := KeyOf(&formats.File{Path: "/a", Size: 3, MtimeNS: 4}); k != (FileKey{"/a", 3, 4}) {
		t.Fatal("KeyOf")
	}
}

func TestExtentSet(t *testing.T) {
	var s extentSet
	for i := range uint64(10000) {
		if !s.add(tensorKey{uint32(i % 7), i * 4096, i%13 + 1}) {
			t.Fatalf("extent %d reported as seen", i)
		}
	}
	for i := range uint64(10000) {
		if s.add(tensorKey{uint32(i % 7), i * 4096, i%13 + 1}) {
			t.Fatalf("extent %d not remembered", i)
		}
	}
	if s.add(tensorKey{0, 0, 2}) != true || s.n != 10001 {
		t.Fatalf("n = %d", s.n)
	}
}

// TestHugeInputsStayBounded: absurd hint lengths and access sizes with an
// unknown end of file must not turn into unbounded work.
func TestHugeInputsStayBounded(t *testing.T) {
	var pages uint64
	emit := func(r *Request) { pages += r.Pages() }
	p := mustBuild(t, "tensor", Env{})
	p.Handle(&Event{Kind: EventTensorLayout, Tensor: TensorLayout{Name: "x", Offset: 0, Length: 1 << 62}}, emit)
	if pages != maxUnboundedTensor {
		t.Fatalf("tensor of 2^62 bytes, unknown EOF: %d pages", pages)
	}
	pages = 0
	s := mustBuild(t, "stride:confidence=1,lookahead=4", Env{})
	for i := range uint64(4) {
		s.Handle(access(1, i*(1<<40), math.MaxUint32), emit)
	}
	if pages != 5*DefaultMaxPages { // 4 strides ahead, then 1 more
		t.Fatalf("stride with 2^32-page accesses: %d pages", pages)
	}
}

func TestHugeAccessesStayBounded(t *testing.T) {
	big := access(1, 1<<50, math.MaxUint32)
	fut := NewFuture([]FutureAccess{{1, 1 << 30, math.MaxUint32}})
	if fut.np != maxAccessPages {
		t.Fatalf("future kept %d pages of one access", fut.np)
	}
	for _, spec := range []string{"readahead", "markov", "stride", "oracle"} {
		b := NewMarkovBuilder(0)
		b.AddRun(0, FileKey{Path: "/f"}, []uint64{1, 2})
		p := mustBuild(t, spec, Env{Future: fut, Markov: b.Build(), FileKey: func(uint32) (FileKey, bool) { return FileKey{Path: "/f"}, true }})
		var pages uint64
		p.Handle(big, func(r *Request) { pages += r.Pages() })
		big.Access.Kind = formats.KindMap
		p.Handle(big, func(r *Request) { pages += r.Pages() })
		big.Access.Kind = formats.KindRead
		if pages > maxUnboundedRead+DefaultMaxPages {
			t.Errorf("%s: %d pages for one huge access", spec, pages)
		}
	}
}
