package policies

import (
	"slices"
	"testing"
)

type raWin struct {
	kind                      RAKind
	index, start, size, async uint64
}

// raRecorder returns a model of cfg (Linux 6.18 unless cfg says) that
// records its decisions.
func raRecorder(cfg ReadaheadConfig) (*Readahead, *[]raWin) {
	if cfg.Kernel == (KernelVersion{}) {
		cfg.Kernel = KernelVersion{6, 18}
	}
	var ws []raWin
	cfg.OnDecision = func(d *RADecision) {
		if d.Window {
			ws = append(ws, raWin{d.Kind, d.Index, d.After.Start, d.After.Size, d.After.AsyncSize})
		} else {
			ws = append(ws, raWin{d.Kind, d.Index, 0, 0, 0})
		}
	}
	return NewReadahead(cfg), &ws
}

func TestInitAndNextRASize(t *testing.T) {
	// read_ahead_kb 128 (32 pages): 1-page reads start at 4 pages,
	// 2 -> 8 (x4 while <= max/32... then x2), large reads start at max.
	for _, c := range []struct{ req, want uint64 }{{1, 4}, {2, 4}, {3, 8}, {4, 8}, {5, 16}, {8, 16}, {9, 32}, {100, 32}} {
		if got := initRASize(c.req, 32); got != c.want {
			t.Errorf("initRASize(%d, 32) = %d, want %d", c.req, got, c.want)
		}
	}
	for _, c := range []struct{ cur, want uint64 }{{1, 4}, {2, 4}, {4, 8}, {8, 16}, {16, 32}, {17, 32}, {32, 32}} {
		if got := nextRASize(c.cur, 32); got != c.want {
			t.Errorf("nextRASize(%d, 32) = %d, want %d", c.cur, got, c.want)
		}
	}
}

// TestReadaheadSequential checks a 1-page sequential read against windows
// computed by hand from mm/readahead.c (ra_pages 32, large folios).
func TestReadaheadSequential(t *testing.T) {
	m, ws := raRecorder(ReadaheadConfig{RAPages: 32, FilePages: func(uint32) uint64 { return 40 }})
	var reqs []Request
	for p := uint64(0); p < 40; p++ {
		m.Read(1, p, 1, collect(&reqs))
	}
	want := []raWin{
		{RASync, 0, 0, 4, 3},      // initial window: 4 x req, async 3, mark at 1
		{RAAsync, 1, 4, 8, 8},     // ramp x2 (4 >= 32/16); order 2: end aligned to 4
		{RAAsync, 4, 12, 4, 4},    // ramp to 16, trimmed to the order-4 alignment (end 16)
		{RAAsync, 12, 16, 8, 8},   // ramp x2; end 24 rounds below start: kept
		{RAAsync, 16, 24, 8, 8},   // ramp to 16, trimmed to the order-5 alignment (end 32)
		{RAAsync, 24, 32, 16, 16}, // ramp x2, reaches EOF (40)
		{RAAsync, 32, 48, 16, 16}, // the mark at 32 still fires: window past EOF, nothing read
	}
	if !slices.Equal(*ws, want) {
		t.Fatalf("windows\n got %v\nwant %v", *ws, want)
	}
	// Every page was read ahead exactly once, nothing past EOF.
	pages := pagesOf(reqs)
	slices.Sort(pages)
	for i, p := range pages {
		if p != uint64(i) {
			t.Fatalf("pages read ahead: %v", pages)
		}
	}
	if len(pages) != 40 {
		t.Fatalf("%d pages read ahead, want 40", len(pages))
	}
}

func TestReadaheadRandomReadKeepsState(t *testing.T) {
	m, ws := raRecorder(ReadaheadConfig{RAPages: 32, Folios: FoliosSmall})
	m.Read(1, 0, 1, func(*Request) {})
	st := m.State(1)
	m.Read(1, 1000, 1, func(*Request) {}) // standalone small random read
	if got := m.State(1); got.Start != st.Start || got.Size != st.Size {
		t.Fatalf("random read changed the window: %+v -> %+v", st, got)
	}
	if last := (*ws)[len(*ws)-1]; last.kind != RASync || last.size != 0 {
		t.Fatalf("random read made a window: %+v", last)
	}
	// A read just after the previous one (index - prev_index <= 1) is
	// sequential: a fresh initial window.
	m.Read(1, 1001, 2, func(*Request) {})
	if last := (*ws)[len(*ws)-1]; last != (raWin{RASync, 1001, 1001, 4, 2}) {
		t.Fatalf("sequential miss: %+v", last)
	}
}

func TestReadaheadMmap(t *testing.T) {
	m, ws := raRecorder(ReadaheadConfig{RAPages: 32, FilePages: func(uint32) uint64 { return 1 << 24 }})
	var reqs []Request
	m.Fault(1, 100, collect(&reqs))
	// Read-around: ra_pages centred on the fault, async ra_pages/4.
	if (*ws)[0] != (raWin{RAMmap, 100, 84, 32, 8}) {
		t.Fatalf("read-around %+v", (*ws)[0])
	}
	if pg := pagesOf(reqs); len(pg) != 32 || pg[0] != 84 || pg[31] != 115 {
		t.Fatalf("read-around pages %v", pg)
	}
	// The mark is at start+size-async = 108: a fault there goes async.
	m.Fault(1, 108, func(*Request) {})
	if last := (*ws)[len(*ws)-1]; last.kind != RAAsync || last.start != 116 {
		t.Fatalf("async after mark: %+v", last)
	}
	// Faults far apart: each misses (the async hit above brought
	// mmap_miss back to 0); once mmap_miss exceeds MMAP_LOTSAMISS the
	// model stops reading around.
	n := len(*ws)
	for i := uint64(1); i <= 150; i++ {
		m.Fault(1, i*10000, func(*Request) {})
	}
	windows := len(*ws) - n
	if st := m.State(1); st.MmapMiss != 150 || windows != MmapLotsaMiss {
		t.Fatalf("mmap_miss %d, %d windows; want 150 and %d", st.MmapMiss, windows, MmapLotsaMiss)
	}
	// Fault-around hits lower mmap_miss again.
	m.MapPages(1, 84, 16)
	if st := m.State(1); st.MmapMiss != 150-16 {
		t.Fatalf("mmap_miss after map_pages %d", st.MmapMiss)
	}
}

func TestReadaheadResidentCallback(t *testing.T) {
	// With a Resident callback the simulator's cache is the authority:
	// an evicted page misses again.
	cache := map[uint64]bool{}
	m, ws := raRecorder(ReadaheadConfig{RAPages: 32, Resident: func(_ uint32, p uint64) bool { return cache[p] }})
	emit := func(r *Request) {
		for _, p := range pagesOf([]Request{*r}) {
			cache[p] = true
		}
	}
	m.Read(1, 0, 1, emit)
	if !cache[3] || cache[4] {
		t.Fatalf("cache after first window: %v", cache)
	}
	clear(cache)
	m.Read(1, 2, 1, emit) // evicted: sync miss again, sequential (prev 1)
	if last := (*ws)[len(*ws)-1]; last.kind != RASync || last.start != 2 {
		t.Fatalf("after eviction: %+v", last)
	}
}

// TestReadaheadTerminatesWhenNothingIsResident guards the read loop: a
// Resident callback that never reports a page (a simulator that dropped
// the requests) must not stall it.
func TestReadaheadTerminatesWhenNothingIsResident(t *testing.T) {
	m, ws := raRecorder(ReadaheadConfig{RAPages: 32, Resident: func(uint32, uint64) bool { return false }, FilePages: func(uint32) uint64 { return 100 }})
	m.Read(1, 0, 64, func(*Request) {})
	m.Read(1, 90, 64, func(*Request) {})
	m.Fault(1, 5, func(*Request) {})
	if len(*ws) == 0 {
		t.Fatal("no decisions")
	}
}
