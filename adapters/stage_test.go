package adapters

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

func TestParseList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", []string{"sqlite", "lmdb", "gguf"}},
		{"all", []string{"sqlite", "lmdb", "gguf"}},
		{"none", []string{}},
		{"gguf,sqlite", []string{"sqlite", "gguf"}},
		{" lmdb , lmdb ", []string{"lmdb"}},
	} {
		got, err := ParseList(c.in)
		if err != nil || !slices.Equal(got, c.want) || got == nil {
			t.Errorf("ParseList(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"sqlite,rocksdb", "sqlite,,gguf", "none,sqlite"} {
		_, err := ParseList(in)
		if !errors.Is(err, ErrUnknownAdapter) || !strings.Contains(err.Error(), "valid: none, all, sqlite, lmdb, gguf") {
			t.Errorf("ParseList(%q) error %v", in, err)
		}
	}
	if Source(GGUF) != "adapter:gguf" {
		t.Error(Source(GGUF))
	}
}

func TestConfigErrors(t *testing.T) {
	files := PathFiles{}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Adapters: []string{"x"}}, `unknown adapter "x"`},
		{Config{PageSize: 3000}, "page size 3000"},
		{Config{TensorOrder: "random"}, `tensor order "random"`},
		{Config{TensorRepack: "neon"}, `tensor repack "neon"`},
	} {
		if _, err := NewStage(c.cfg, files); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewStage(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := NewStage(Config{}, nil); err == nil {
		t.Error("a stage without Files was built")
	}
	s, err := NewStage(Config{Adapters: []string{}}, nil)
	if err != nil || len(s.Adapters()) != 0 {
		t.Errorf("no adapters: %v %v", s, err)
	}
}

// countingFiles counts opens and closes and can refuse files.
type countingFiles struct {
	paths  map[uint32]string
	refuse map[uint32]bool
	opens  map[uint32]int
	closes int
}

func (c *countingFiles) Open(file, pid uint32) (Content, error) {
	c.opens[file]++
	if c.refuse[file] {
		return nil, errors.New("permission denied")
	}
	f, err := os.Open(c.paths[file])
	if err != nil {
		return nil, err
	}
	return &countingContent{OSContent{f}, c}, nil
}

type countingContent struct {
	OSContent
	c *countingFiles
}

func (c *countingContent) Close() error {
	c.c.closes++
	return c.OSContent.Close()
}

func accessEv(file uint32, kind formats.AccessKind, page uint64) *policies.Event {
	return &policies.Event{Kind: policies.EventFileAccess, TS: page + 1, PID: 3, File: file,
		Access: policies.FileAccess{Kind: kind, Page: page, NPages: 1}}
}

// TestStageRecognition checks that a file's header is read once: an
// unrecognized or refused file is never opened again, a recognized one
// stays open until dropped, and only demand kinds are examined.
func TestStageRecognition(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, make([]byte, 8192), 0o644)
	db := gunzip(t, "sqlite/without-rowid.db.gz", "x.db")
	gguf := filepath.Join(testdata, "gguf", "small-q8.gguf")
	cf := &countingFiles{paths: map[uint32]string{1: plain, 2: db, 3: plain, 4: gguf}, refuse: map[uint32]bool{3: true}, opens: map[uint32]int{}}
	s, err := NewStage(Config{MaxFiles: 1}, cf)
	if err != nil {
		t.Fatal(err)
	}
	sink := func(*policies.Event, string) {}
	for range 3 {
		for _, f := range []uint32{1, 2, 3} {
			s.Process(accessEv(f, formats.KindRead, 0), sink)
		}
	}
	for _, k := range []formats.AccessKind{formats.KindCacheAdd, formats.KindReadaheadSync, formats.KindImported} {
		s.Process(accessEv(4, k, 0), sink)
	}
	if cf.opens[1] != 1 || cf.opens[2] != 1 || cf.opens[3] != 1 || cf.opens[4] != 0 {
		t.Errorf("opens %v: want each of 1-3 once, 4 (non-demand accesses only) never", cf.opens)
	}
	st := s.Stats()
	if st.Recognized != 1 || st.Unrecognized != 1 || st.OpenErrors != 1 {
		t.Errorf("stats %+v", st)
	}
	if got := s.Status(); len(got) != 1 || got[0].File != 2 || got[0].Adapter != SQLite || !strings.Contains(got[0].Detail, "page size 4096") {
		t.Errorf("status %+v", got)
	}
	// A second recognized file evicts the first (MaxFiles 1), closing it.
	before := cf.closes
	s.Process(accessEv(4, formats.KindRead, 0), sink)
	if cf.closes != before+1 || s.Stats().Dropped != 1 || len(s.Status()) != 1 || s.Status()[0].Adapter != GGUF {
		t.Errorf("after a second file: closes %d->%d, stats %+v, status %+v", before, cf.closes, s.Stats(), s.Status())
	}
	// Forget drops the state; the file is recognized again on its next access.
	s.Forget(4)
	s.Forget(1)
	s.Process(accessEv(1, formats.KindRead, 0), sink)
	if cf.opens[1] != 2 || len(s.Status()) != 0 {
		t.Errorf("after Forget: opens %v status %+v", cf.opens, s.Status())
	}
	// Unrecognized files were closed at once; Close closes file 1's
	// second open, the only state left... none: file 1 is unrecognized.
	opened := 0
	for f, n := range cf.opens {
		if !cf.refuse[f] {
			opened += n
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if cf.closes != opened {
		t.Errorf("%d contents opened, %d closed", opened, cf.closes)
	}
}

// TestStageAccounting checks the counting of the adapters' reads: the
// header read by the first access is a page-cache hit when that access
// is the first page, and counted as possible I/O otherwise.
func TestStageAccounting(t *testing.T) {
	db := gunzip(t, "sqlite/without-rowid.db.gz", "x.db")
	_, s := run(t, Config{}, db, []policies.Event{*accessEv(1, formats.KindRead, 0)})
	if st := s.Stats(); st.PagesHit == 0 || st.PagesIO != 0 {
		t.Errorf("first access to page 0: %+v", st)
	}
	_, s = run(t, Config{}, db, []policies.Event{*accessEv(1, formats.KindRead, 5)})
	if st := s.Stats(); st.PagesIO != 1 {
		t.Errorf("first access to page 5: %+v, want the header read counted as I/O", st)
	}
}

// TestStageHeaderFirst checks Config.HeaderFirst: a file first accessed
// past its first page is not opened (no read the program did not do)
// until an access covers page 0, and is recognized then.
func TestStageHeaderFirst(t *testing.T) {
	db := gunzip(t, "sqlite/without-rowid.db.gz", "x.db")
	cf := &countingFiles{paths: map[uint32]string{1: db}, refuse: map[uint32]bool{}, opens: map[uint32]int{}}
	s, err := NewStage(Config{HeaderFirst: true}, cf)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sink := func(*policies.Event, string) {}
	s.Process(accessEv(1, formats.KindRead, 5), sink)
	s.Process(accessEv(1, formats.KindRead, 7), sink)
	if cf.opens[1] != 0 || s.Stats().Recognized != 0 || s.Stats().Unrecognized != 0 {
		t.Fatalf("before page 0: opens %v, stats %+v: want the file untouched", cf.opens, s.Stats())
	}
	s.Process(accessEv(1, formats.KindRead, 0), sink)
	if st := s.Stats(); cf.opens[1] != 1 || st.Recognized != 1 || st.PagesIO != 0 {
		t.Errorf("at page 0: opens %v, stats %+v: want it recognized from the page just read", cf.opens, st)
	}
}

// sizedFiles is countingFiles that knows the files' sizes (FileSizes).
type sizedFiles struct{ *countingFiles }

func (s sizedFiles) FileSize(file uint32) (uint64, bool) {
	fi, err := os.Stat(s.paths[file])
	if err != nil {
		return 0, false
	}
	return uint64(fi.Size()), true
}

// TestStageSkipsWholeReads checks FileSizes: a file whose first access to
// its first page read all of it is not opened, and is recognized at a
// later access that covers it only in part (it has grown).
func TestStageSkipsWholeReads(t *testing.T) {
	db := gunzip(t, "sqlite/without-rowid.db.gz", "x.db")
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	cf := &countingFiles{paths: map[uint32]string{1: db}, refuse: map[uint32]bool{}, opens: map[uint32]int{}}
	s, err := NewStage(Config{HeaderFirst: true}, sizedFiles{cf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sink := func(*policies.Event, string) {}
	whole := accessEv(1, formats.KindRead, 0)
	whole.Access.NPages = uint32((fi.Size() + 4095) / 4096)
	s.Process(whole, sink)
	if cf.opens[1] != 0 || s.Stats().Recognized != 0 {
		t.Fatalf("a read of the whole file: opens %v, stats %+v: want it not opened", cf.opens, s.Stats())
	}
	s.Process(accessEv(1, formats.KindRead, 0), sink)
	if cf.opens[1] != 1 || s.Stats().Recognized != 1 {
		t.Errorf("a read of its first page alone: opens %v, stats %+v: want it recognized", cf.opens, s.Stats())
	}
}

// TestStageDispatch runs a recorded scan through Stage.Dispatch into the
// tree policy: the policy's requests must cover the pages the scan reads
// later, which they cannot do without the adapter.
func TestStageDispatch(t *testing.T) {
	db := gunzip(t, "sqlite/rowid.db.gz", "x.db")
	evs := readEvents(readSpans(t, "sqlite/rowid-rowid.reads"))
	tree, err := policies.Build("tree", policies.Env{})
	if err != nil {
		t.Fatal(err)
	}
	d := policies.NewDispatcher(tree)
	s, err := NewStage(Config{}, PathFiles{Path: func(uint32) (string, bool) { return db, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	requested := map[uint64]int{}
	for i := range evs {
		s.Dispatch(d, &evs[i], func(r *policies.Request) {
			for _, rg := range r.Ranges {
				for p := rg.First; p < rg.First+uint64(rg.N); p++ {
					if _, ok := requested[p]; !ok {
						requested[p] = i
					}
				}
			}
		})
	}
	covered, total := 0, 0
	seen := map[uint64]bool{}
	for i, e := range evs {
		if seen[e.Access.Page] {
			continue
		}
		seen[e.Access.Page] = true
		total++
		if at, ok := requested[e.Access.Page]; ok && at < i {
			covered++
		}
	}
	t.Logf("tree policy requested %d pages; %d of %d pages read were requested before", len(requested), covered, total)
	if float64(covered) < 0.9*float64(total) {
		t.Errorf("%d of %d pages requested in time", covered, total)
	}
	if d.Events <= uint64(len(evs)) {
		t.Errorf("dispatcher saw %d events for %d accesses: no derived events", d.Events, len(evs))
	}
}

func TestToHint(t *testing.T) {
	for _, ev := range []policies.Event{
		{Kind: policies.EventTreeChildEnter, TS: 5, PID: 2, TID: 4, File: 9, Tree: policies.TreeChildEnter{ParentPage: 4, Position: 3, Children: []uint64{7, 8}}},
		{Kind: policies.EventTensorLayout, TS: 6, PID: 2, File: 9, Tensor: policies.TensorLayout{Name: "blk.0.attn_q.weight", Offset: 4096, Length: 99}},
	} {
		var h formats.Hint
		if !ToHint(&ev, SQLite, &h) {
			t.Fatalf("ToHint(%v) = false", ev)
		}
		if h.Source != "adapter:sqlite" || h.TID != ev.TID {
			t.Errorf("hint source %q tid %d", h.Source, h.TID)
		}
		var back policies.Event
		if !back.FromHint(&h) || back.Kind != ev.Kind || back.TS != ev.TS || back.File != ev.File ||
			back.Tree.ParentPage != ev.Tree.ParentPage || back.Tree.Position != ev.Tree.Position ||
			!slices.Equal(back.Tree.Children, ev.Tree.Children) || back.Tensor != ev.Tensor {
			t.Errorf("round trip of %+v gave %+v", ev, back)
		}
	}
	if ToHint(&policies.Event{Kind: policies.EventFileAccess}, SQLite, &formats.Hint{}) {
		t.Error("a FileAccess became a hint")
	}
}

// TestStageAllocs checks that the steady state of a scan allocates
// nothing per event: a rowid table scanned by rowid, and one scanned
// through an index, which looks its rows up (the lookup lists, the rowid
// map, the schema).
func TestStageAllocs(t *testing.T) {
	for _, c := range []struct {
		db, reads  string
		readCached bool // the walk (the database, just written, is cached)
	}{
		{"rowid", "rowid-rowid", false},
		{"rowid-insert", "rowid-insert-key", false},
		{"without-rowid", "without-rowid-key", true},
		{"rowid-insert", "rowid-insert-key", true},
	} {
		db := gunzip(t, "sqlite/"+c.db+".db.gz", "x.db")
		evs := readEvents(readSpans(t, "sqlite/"+c.reads+".reads"))
		s, err := NewStage(Config{ReadCached: c.readCached}, PathFiles{Path: func(uint32) (string, bool) { return db, true }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		n := 0
		sink := func(*policies.Event, string) { n++ }
		for i := range evs { // warm up: slots, buffers, index
			s.Process(&evs[i], sink)
		}
		i := 0
		allocs := testing.AllocsPerRun(2*len(evs), func() {
			s.Process(&evs[i%len(evs)], sink)
			i++
		})
		if allocs != 0 {
			t.Errorf("%s: %.2f allocations per event in steady state", c.reads, allocs)
		}
		if n == 0 || (c.db == "rowid-insert" && s.Stats().Lookups == 0) || (c.db == "without-rowid" && s.Stats().PagesCached == 0) {
			t.Errorf("%s: %d events derived, stats %+v", c.reads, n, s.Stats())
		}
	}
}

// BenchmarkStageSQLiteScan measures the stage's cost per access on a
// recorded scan. Run: go test -bench StageSQLiteScan ./adapters
func BenchmarkStageSQLiteScan(b *testing.B) {
	benchStage(b, "without-rowid", "without-rowid-key")
}

// BenchmarkStageSQLiteLookups measures the stage's cost per access on a
// recorded scan through the index of a rowid table whose rows are looked
// up in random order (the rowid-insert layout): events/s and allocs/op
// (one op is one access). Run: go test -bench StageSQLiteLookups ./adapters
func BenchmarkStageSQLiteLookups(b *testing.B) {
	benchStage(b, "rowid-insert", "rowid-insert-key")
}

func benchStage(b *testing.B, name, reads string) {
	db := gunzip(b, "sqlite/"+name+".db.gz", "x.db")
	evs := readEvents(readSpans(b, "sqlite/"+reads+".reads"))
	s, err := NewStage(Config{}, PathFiles{Path: func(uint32) (string, bool) { return db, true }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	derived := 0
	sink := func(*policies.Event, string) { derived++ }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Process(&evs[i%len(evs)], sink)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(derived)/float64(b.N), "derived/event")
}

// uncachedContent is memContent whose page cache holds nothing.
type uncachedContent struct{ memContent }

func (uncachedContent) Cached(int64, int64) (bool, error) { return false, nil }

type uncachedFiles struct{ data []byte }

func (m uncachedFiles) Open(uint32, uint32) (Content, error) {
	return uncachedContent{memContent(m.data)}, nil
}

// TestStageLateRecognition: with HeaderFirst, a file whose first access
// seen is not to its header (tracing started after the program read it)
// is recognized with ReadCached when the header is cached, reading only
// that, and skipped when it is not; without ReadCached it waits for an
// access to page 0.
func TestStageLateRecognition(t *testing.T) {
	db := prefix(t, "sqlite/without-rowid.db.gz", 64<<10)
	ev := policies.Event{Kind: policies.EventFileAccess, File: 1, PID: 1,
		Access: policies.FileAccess{Kind: formats.KindRead, Page: 5, NPages: 1}}
	for _, tc := range []struct {
		name       string
		files      Files
		readCached bool
		want       bool
	}{
		{"cached", memFiles{db}, true, true},
		{"not cached", uncachedFiles{db}, true, false},
		{"no ReadCached", memFiles{db}, false, false},
	} {
		s, err := NewStage(Config{Adapters: []string{SQLite}, HeaderFirst: true, ReadCached: tc.readCached}, tc.files)
		if err != nil {
			t.Fatal(err)
		}
		s.Process(&ev, func(*policies.Event, string) {})
		st := s.Stats()
		if s.Recognized(1) != tc.want || st.PagesIO != 0 || (tc.want && st.PagesCached != 1) {
			t.Errorf("%s: recognized %v, want %v; stats %+v", tc.name, s.Recognized(1), tc.want, st)
		}
		// A later read of the header: recognized then only without
		// ReadCached (a file skipped once is not tried again).
		ev0 := ev
		ev0.Access.Page = 0
		s.Process(&ev0, func(*policies.Event, string) {})
		if want := tc.want || !tc.readCached; s.Recognized(1) != want {
			t.Errorf("%s: after a read of page 0, recognized %v, want %v", tc.name, s.Recognized(1), want)
		}
		s.Close()
	}
}
