package simulate

import (
	"errors"
	"math/rand"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate/simtest"
)

// mixedStream returns a random bundle of every kind of access row (reads,
// faults and map rows with mapping columns, metadata rows with service
// times, kernel rows the simulator skips) and hints, some at the
// timestamps of accesses, some after the last one; and the events a
// merged reading of it gives (hints first on equal timestamps).
func mixedStream(seed int64, rows int) (*simtest.Bundle, []policies.Event) {
	rng := rand.New(rand.NewSource(seed))
	b := &simtest.Bundle{BatchRows: 97 + rng.Intn(300)}
	for id := uint32(1); id <= 3; id++ {
		b.Files = append(b.Files, formats.File{ID: id, Ino: uint64(id), Path: "/f" + string(rune('0'+id)), Size: 4096 * (4000 + 1000*uint64(id)), Mode: formats.ModeRegular})
	}
	kinds := []formats.AccessKind{formats.KindRead, formats.KindRead, formats.KindRead, formats.KindFault, formats.KindMap, formats.KindCacheAdd, formats.KindOpen, formats.KindStat}
	ts := uint64(1e9)
	var evs []policies.Event
	hint := func(ts uint64) {
		h := formats.Hint{TS: ts, PID: 1, TID: uint32(rng.Intn(3)), Kind: formats.HintTreeChildEnter, FileID: uint32(1 + rng.Intn(3)),
			ParentPage: uint64(rng.Intn(4000)), Children: []uint64{uint64(rng.Intn(4000)), uint64(rng.Intn(4000))}}
		if rng.Intn(4) == 0 {
			h.Kind, h.Children = formats.HintCustom, nil
		}
		b.Hints = append(b.Hints, h)
		var ev policies.Event
		ev.FromHint(&h)
		ev.Tree.Children = append([]uint64(nil), h.Children...)
		evs = append(evs, ev)
	}
	seq := uint64(0)
	for i := 0; i < rows; i++ {
		ts += uint64(rng.Intn(30_000))
		if rng.Intn(25) == 0 {
			hint(ts) // same timestamp as the access: comes first
		}
		a := formats.Access{TS: ts, PID: 1, TID: uint32(1 + rng.Intn(3)), FileID: uint32(1 + rng.Intn(3)), FirstPage: uint64(rng.Intn(3500)),
			NPages: uint32(1 + rng.Intn(3)), Kind: kinds[rng.Intn(len(kinds))]}
		if rng.Intn(2) == 0 { // sequential runs of file 1
			a.FileID, a.FirstPage = 1, seq%3900
			seq += uint64(a.NPages)
		}
		switch {
		case a.Kind.Metadata():
			a.NPages, a.FirstPage = 0, 0
			a.EndNS, a.Op = ts+uint64(rng.Intn(5000)), uint64(i+1)
		case a.Kind.Mapping():
			a.Prot, a.MapFirstPage, a.MapPages = formats.ProtRead|formats.ProtExec*uint8(rng.Intn(2)), 0, 4000
		}
		if a.Kind == formats.KindRead && rng.Intn(3) == 0 {
			a.EndNS, a.Op = ts+uint64(rng.Intn(20_000)), uint64(i+1)
		}
		b.Accesses = append(b.Accesses, a)
		evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: a.TS, PID: a.PID, TID: a.TID, File: a.FileID, Access: policies.AccessOf(&a)})
	}
	for range 3 {
		ts += 100
		hint(ts) // after the last access
	}
	return b, evs
}

// sameResults reports whether two reports have the same lanes and counts
// (elapsed time aside).
func sameResults(a, b *Report) bool {
	return a.Events == b.Events && a.Threads == b.Threads && a.ThinkTime == b.ThinkTime && reflect.DeepEqual(a.Policies, b.Policies)
}

// bundleAndEvents runs cfg on the bundle in (and closes it), then on the
// same events one by one.
func bundleAndEvents(t *testing.T, cfg Config, in *Input, evs []policies.Event) (got, want *Report) {
	t.Helper()
	src, err := in.Source()
	if err != nil {
		t.Fatal(err)
	}
	got, err = Run(cfg, src)
	src.Close()
	in.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want, err = Run(cfg, &SliceSource{Events: evs}); err != nil {
		t.Fatal(err)
	}
	return got, want
}

// TestBundleBatchesMatchEvents: a bundle's record batches, decoded in
// parallel with only the columns the lanes need and the hints merged in,
// give the reports of the same events fed one by one, with and without
// policies.
func TestBundleBatchesMatchEvents(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		b, evs := mixedStream(seed, 3000)
		dir := simtest.Write(t, "mixed", b)
		for _, cfg := range []Config{
			{CacheBytes: 4096 * 500, NoReadahead: true, Oracle: false},
			{CacheBytes: 4096 * 800, Policies: []string{"stride", "tree:window=8"}, Oracle: true, CacheModel: TwoList},
		} {
			cfg.Device = Presets["nvme"]
			in, err := OpenInput(dir, DeferReferenceCheck())
			if err != nil {
				t.Fatal(err)
			}
			cfg.PageSize, cfg.Env = in.PageSize, in.Env()
			got, want := bundleAndEvents(t, cfg, in, evs)
			if !sameResults(got, want) {
				t.Errorf("seed %d, %+v: bundle batches give\n%+v\nevents give\n%+v", seed, cfg.Policies, got, want)
			}
			if want.Events != uint64(len(evs)) || want.Policies[0].Hits == 0 {
				t.Errorf("seed %d: degenerate stream: %+v", seed, want)
			}
		}
	}
}

// TestPlainRunMatches: runs of one thread's one-page reads of one file
// take plainRun's flat loop in a lane without policies; the reports equal
// those of the general path, with hints between the runs, and the loop
// did serve most rows.
func TestPlainRunMatches(t *testing.T) {
	defer func() { plainFastPath = true }()
	for seed := int64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewSource(seed))
		var evs []policies.Event
		ts := uint64(5e9)
		for i := 0; i < 30000; i++ {
			ts += uint64(rng.Intn(3000))
			page := uint64(rng.Intn(6000))
			if seed%2 == 0 { // Zipf-like: a hot set
				page = uint64(rng.Intn(1+rng.Intn(6000))) % 6000
			}
			ev := policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 7, TID: 7, File: 2,
				Access: policies.FileAccess{Kind: formats.KindRead, Page: page, NPages: uint32(rng.Intn(2))}}
			if rng.Intn(2000) == 0 {
				ev = policies.Event{Kind: policies.EventTreeChildEnter, TS: ts, PID: 7, File: 2}
			}
			evs = append(evs, ev)
		}
		cfg := Config{
			CacheBytes:  int64(4096 * (16 + rng.Intn(3000))),
			Device:      Presets[PresetNames()[seed%3]],
			NoReadahead: true,
		}
		cfg.Env.FilePages = func(f uint32) uint64 { return 6000 }
		var reports [2]*Report
		var flat uint64
		for i, fast := range []bool{true, false} {
			plainFastPath = fast
			s, err := newSimulator(cfg, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.run(&SliceSource{Events: evs}); err != nil {
				t.Fatal(err)
			}
			reports[i] = s.Report()
			if fast {
				flat = s.lanes[0].flatRows
			}
		}
		if !reflect.DeepEqual(reports[0].Policies, reports[1].Policies) {
			t.Errorf("seed %d: flat loop differs:\n%+v\ngeneral:\n%+v", seed, reports[0].Policies, reports[1].Policies)
		}
		if b := reports[0].Policies[0]; b.Hits == 0 || b.Misses == 0 || flat < b.Accesses/2 {
			t.Errorf("seed %d: flat loop served %d of %d accesses (%+v)", seed, flat, b.Accesses, b)
		}
	}
}

// TestDeferredReferenceCheck: with DeferReferenceCheck, OpenInput does
// not read the rows, and Run stops at the first batch that references a
// file files.arrow lacks, with the error CheckReferences gives; a bundle
// whose only bad reference is a hint's is refused too.
func TestDeferredReferenceCheck(t *testing.T) {
	for _, inHint := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "b")
		w, err := formats.Create(dir, formats.AllowUnknownFiles(), formats.WithBatchRows(64))
		if err != nil {
			t.Fatal(err)
		}
		w.AddFile(formats.File{ID: 1, Ino: 1, Path: "/a", Size: 1 << 20})
		for i := 0; i < 1000; i++ {
			a := formats.Access{TS: uint64(1000 + i), FileID: 1, FirstPage: uint64(i % 256), NPages: 1, Kind: formats.KindRead}
			if !inHint && i >= 700 {
				a.FileID = 9
			}
			w.Append(&a)
		}
		h := formats.Hint{TS: 1500, Kind: formats.HintTreeChildEnter, FileID: 1}
		if inHint {
			h.FileID = 9
		}
		w.AppendHint(&h)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := formats.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		want := b.CheckReferences()
		if want == nil {
			t.Fatal("CheckReferences found nothing")
		}
		in, err := OpenInput(dir, DeferReferenceCheck())
		if err != nil {
			t.Fatalf("OpenInput deferred: %v", err)
		}
		src, err := in.Source()
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{CacheBytes: 1 << 20, Device: Presets["nvme"], NoReadahead: true, PageSize: in.PageSize, Env: in.Env()}
		r, err := Run(cfg, src)
		var mf *formats.MissingFilesError
		if r != nil || !errors.As(err, &mf) || err.Error() != want.Error() {
			t.Errorf("hint %v: Run: %v, %v; want %v", inHint, r, err, want)
		}
		src.Close()
		if _, err := in.Future(); err == nil || err.Error() != want.Error() {
			t.Errorf("hint %v: Future: %v; want %v", inHint, err, want)
		}
		in.Close()
		if _, err := OpenInput(dir); err == nil || err.Error() != want.Error() {
			t.Errorf("hint %v: OpenInput: %v; want %v", inHint, err, want)
		}
	}
}

// TestScanFactsFollowChanges: batches of one bundle that alternate between
// simple (one thread's one-page reads of one file) and batches that differ
// in one row (another thread, file, page count, an end time or an
// operation id) give the reports of the same events fed one by one:
// what scan keeps of unchanged columns never outlives a change.
func TestScanFactsFollowChanges(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewSource(seed))
		b := &simtest.Bundle{BatchRows: 100, Files: []formats.File{
			{ID: 1, Ino: 1, Path: "/a", Size: 4096 * 5000, Mode: formats.ModeRegular},
			{ID: 2, Ino: 2, Path: "/b", Size: 4096 * 5000, Mode: formats.ModeRegular}}}
		var evs []policies.Event
		ts := uint64(1e9)
		for bi := 0; bi < 60; bi++ {
			odd := rng.Intn(6) // 0: simple
			at := rng.Intn(100)
			for r := 0; r < 100; r++ {
				ts += uint64(1000 + rng.Intn(3000))
				a := formats.Access{TS: ts, PID: 3, TID: 3, FileID: 1, FirstPage: uint64(rng.Intn(5000)), NPages: 1, Kind: formats.KindRead}
				if r == at {
					switch odd {
					case 1:
						a.TID = 4
					case 2:
						a.FileID = 2
					case 3:
						a.NPages = 2
					case 4:
						a.EndNS = ts + 500
					case 5:
						a.Op = uint64(bi + 1)
					}
				}
				b.Accesses = append(b.Accesses, a)
				evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: a.TS, PID: a.PID, TID: a.TID, File: a.FileID, Access: policies.AccessOf(&a)})
			}
		}
		dir := simtest.Write(t, "alt", b)
		in, err := OpenInput(dir)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{CacheBytes: 4096 * 600, Device: Presets["nvme"], NoReadahead: true, PageSize: in.PageSize, Env: in.Env()}
		got, want := bundleAndEvents(t, cfg, in, evs)
		if !sameResults(got, want) {
			t.Errorf("seed %d: bundle gives\n%+v\nevents give\n%+v", seed, got.Policies, want.Policies)
		}
	}
}
