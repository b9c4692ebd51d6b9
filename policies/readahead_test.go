package policies

import (
	"slices"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
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

func TestParseKernelVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		want KernelVersion
	}{
		{"6.18.44-fc-v1045", KernelVersion{6, 18}},
		{"6.1.0-57-cloud-amd64", KernelVersion{6, 1}},
		{"6.12.117+deb12-cloud-amd64", KernelVersion{6, 12}},
		{"6.12", KernelVersion{6, 12}},
		{" 7.0-rc1 ", KernelVersion{7, 0}},
	} {
		got, err := ParseKernelVersion(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseKernelVersion(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "synthetic", "6", "x.1", "6.x", "-1.2", "100.1"} {
		if v, err := ParseKernelVersion(bad); err == nil {
			t.Errorf("ParseKernelVersion(%q) = %v, want an error", bad, v)
		}
	}
	for _, c := range []struct {
		v    KernelVersion
		want raEra
	}{
		{KernelVersion{5, 15}, era61}, {KernelVersion{6, 1}, era61}, {KernelVersion{6, 10}, era61},
		{KernelVersion{6, 11}, era612}, {KernelVersion{6, 12}, era612}, {KernelVersion{6, 15}, era612},
		{KernelVersion{6, 16}, era618}, {KernelVersion{6, 18}, era618}, {KernelVersion{7, 2}, era618},
	} {
		if got := eraOf(c.v); got != c.want {
			t.Errorf("eraOf(%v) = %v, want %v", c.v, got, c.want)
		}
	}
}

// TestReadaheadExecFault checks the exec-mapping path against the numbers
// Linux 6.18 traces for a fault at page 5000 of a cold file with
// read_ahead_kb 8192 (docs/policies.md): read-around index 3976 size 2048
// async 512; on an executable mapping index 5000 size 2048 async 0, clamped
// to the mapping since 6.16; before 6.16 exec faults read around too.
func TestReadaheadExecFault(t *testing.T) {
	const pages = 16384
	for _, c := range []struct {
		kernel KernelVersion
		fi     FaultInfo
		want   raWin
	}{
		{KernelVersion{6, 18}, FaultInfo{Page: 5000, Prot: formats.ProtRead}, raWin{RAMmap, 5000, 3976, 2048, 512}},
		{KernelVersion{6, 18}, FaultInfo{Page: 5000, Prot: formats.ProtRead | formats.ProtExec}, raWin{RAExec, 5000, 5000, 2048, 0}},
		{KernelVersion{6, 18}, FaultInfo{Page: 5000, Prot: formats.ProtRead | formats.ProtExec, MapFirst: 4000, MapPages: 1500}, raWin{RAExec, 5000, 5000, 500, 0}},
		{KernelVersion{6, 16}, FaultInfo{Page: 1290, Prot: formats.ProtExec, MapFirst: 1000, MapPages: 300}, raWin{RAExec, 1290, 1290, 10, 0}},
		{KernelVersion{6, 12}, FaultInfo{Page: 5000, Prot: formats.ProtRead | formats.ProtExec}, raWin{RAMmap, 5000, 3976, 2048, 512}},
		{KernelVersion{6, 1}, FaultInfo{Page: 5000, Prot: formats.ProtRead | formats.ProtExec, MapFirst: 4000, MapPages: 1500}, raWin{RAMmap, 5000, 3976, 2048, 512}},
	} {
		m, ws := raRecorder(ReadaheadConfig{Kernel: c.kernel, RAPages: 2048, FilePages: func(uint32) uint64 { return pages }})
		var reqs []Request
		m.FaultWith(1, c.fi, collect(&reqs))
		if len(*ws) != 1 || (*ws)[0] != c.want {
			t.Errorf("Linux %v, fault %+v: decisions %v, want %v", c.kernel, c.fi, *ws, c.want)
			continue
		}
		want := c.want.size
		if c.want.start+want > pages {
			want = pages - c.want.start
		}
		if got := uint64(len(pagesOf(reqs))); got != want {
			t.Errorf("Linux %v, fault %+v: %d pages read, want %d", c.kernel, c.fi, got, want)
		}
		// The exec window has no PG_readahead mark: touching all of it
		// starts no async readahead.
		if c.want.kind == RAExec {
			for p := c.want.start; p < c.want.start+c.want.size; p++ {
				m.FaultWith(1, FaultInfo{Page: p, Prot: c.fi.Prot, MapFirst: c.fi.MapFirst, MapPages: c.fi.MapPages}, func(*Request) {})
			}
			if len(*ws) != 1 {
				t.Errorf("Linux %v: faults in an exec window made decisions %v", c.kernel, (*ws)[1:])
			}
		}
	}
}

// TestReadaheadEras checks a 1-page sequential read that skips to the end
// of the first window, where the kernels differ: 6.1's ondemand_readahead
// takes index == start+size as the expected index, ramps up and merges the
// next window (the read would hit its own marker); 6.12 and 6.18 rebuild
// the window from the cached history (page_cache_prev_miss).
func TestReadaheadEras(t *testing.T) {
	for _, c := range []struct {
		kernel KernelVersion
		want   []raWin
	}{
		{KernelVersion{6, 1}, []raWin{{RASync, 0, 0, 4, 3}, {RASync, 4, 4, 24, 16}}},
		{KernelVersion{6, 12}, []raWin{{RASync, 0, 0, 4, 3}, {RASync, 4, 4, 9, 1}}},
		{KernelVersion{6, 18}, []raWin{{RASync, 0, 0, 4, 3}, {RASync, 4, 4, 9, 1}}},
	} {
		m, ws := raRecorder(ReadaheadConfig{Kernel: c.kernel, RAPages: 32, Folios: FoliosSmall, FilePages: func(uint32) uint64 { return 1000 }})
		m.Read(1, 0, 1, func(*Request) {})
		m.Read(1, 4, 1, func(*Request) {})
		if !slices.Equal(*ws, c.want) {
			t.Errorf("Linux %v: windows %v, want %v", c.kernel, *ws, c.want)
		}
	}
}

// TestReadaheadLargeFoliosOldKernels follows page_cache_ra_order with
// large folios on 6.1 and 6.12 (XFS there) by hand: the caller's order
// + 2, so the initial 4-page window is one order-2 folio whose head page
// carries the mark, and the read that made it triggers async readahead
// at once; 6.1's ondemand_readahead treats index 0 as a fresh start.
func TestReadaheadLargeFoliosOldKernels(t *testing.T) {
	for _, c := range []struct {
		kernel KernelVersion
		want   []raWin
	}{
		{KernelVersion{6, 1}, []raWin{{RASync, 0, 0, 4, 3}, {RAAsync, 0, 0, 4, 3}, {RASync, 4, 4, 24, 16}}},
		{KernelVersion{6, 12}, []raWin{{RASync, 0, 0, 4, 3}, {RAAsync, 0, 4, 8, 8}, {RAAsync, 4, 12, 16, 16}}},
	} {
		m, ws := raRecorder(ReadaheadConfig{Kernel: c.kernel, RAPages: 32, Folios: FoliosLarge, FilePages: func(uint32) uint64 { return 1000 }})
		for p := uint64(0); p < 5; p++ {
			m.Read(1, p, 1, func(*Request) {})
		}
		if !slices.Equal(*ws, c.want) {
			t.Errorf("Linux %v: windows %v, want %v", c.kernel, *ws, c.want)
		}
		f := m.file(1)
		if head, n, _ := m.folio(f, 2); head != 0 || n != 4 {
			t.Errorf("Linux %v: page 2 is in a %d-page folio at %d, want the order-2 folio at 0", c.kernel, n, head)
		}
	}
}

// TestReadaheadFaultRetry checks that the retried attempt of a cold fault
// (FAULT_FLAG_TRIED, two rows of one op, or, without ops, the same thread
// and page again) leaves mmap_miss alone, as the kernel skips
// do_async_mmap_readahead for it; a new fault on the cached page lowers it.
func TestReadaheadFaultRetry(t *testing.T) {
	fault := func(m *Readahead, tid uint32, page, op uint64) {
		ev := Event{Kind: EventFileAccess, File: 1, TID: tid, Access: FileAccess{Kind: formats.KindFault, Page: page, NPages: 1, Op: op}}
		m.Handle(&ev, func(*Request) {})
	}
	for _, c := range []struct {
		name string
		run  func(m *Readahead)
		want uint32
	}{
		{"retry without ops", func(m *Readahead) { fault(m, 7, 100, 0); fault(m, 7, 100, 0) }, 1},
		{"retry by op", func(m *Readahead) { fault(m, 7, 100, 5); fault(m, 7, 100, 5) }, 1},
		{"new fault by op", func(m *Readahead) { fault(m, 7, 100, 5); fault(m, 7, 100, 6) }, 0},
		{"other thread", func(m *Readahead) { fault(m, 7, 100, 0); fault(m, 8, 100, 0) }, 0},
		{"other page", func(m *Readahead) { fault(m, 7, 100, 0); fault(m, 7, 101, 0) }, 0},
	} {
		m, _ := raRecorder(ReadaheadConfig{RAPages: 32, FilePages: func(uint32) uint64 { return 1 << 20 }})
		c.run(m)
		if got := m.State(1).MmapMiss; got != c.want {
			t.Errorf("%s: mmap_miss %d, want %d", c.name, got, c.want)
		}
	}
	// With every cold fault retried, mmap_miss passes MMAP_LOTSAMISS and
	// read-around stops (the kernel's private write faults, which have no
	// fault-around, do exactly this).
	m, ws := raRecorder(ReadaheadConfig{RAPages: 32, FilePages: func(uint32) uint64 { return 1 << 24 }})
	for i := uint64(1); i <= 150; i++ {
		fault(m, 7, i*10000, 0)
		fault(m, 7, i*10000, 0)
	}
	if got := len(*ws); got != MmapLotsaMiss || m.State(1).MmapMiss != 150 {
		t.Errorf("%d read-arounds, mmap_miss %d; want %d and 150", got, m.State(1).MmapMiss, MmapLotsaMiss)
	}
}

// TestReadaheadFileRA checks per-file device parameters: read_ahead_kb
// sets a file's maximum window, max_sectors_kb how far a large read may
// go past it; an explicit kb= overrides the device's read_ahead_kb.
func TestReadaheadFileRA(t *testing.T) {
	env := Env{
		Kernel:    "6.18",
		FilePages: func(uint32) uint64 { return 1 << 20 },
		FileRA: func(file uint32) RAParams {
			switch file {
			case 2:
				return RAParams{ReadAheadKB: 512}
			case 3:
				return RAParams{ReadAheadKB: 128, MaxSectorsKB: 1024}
			}
			return RAParams{}
		},
	}
	firstWindow := func(spec string, file uint32, req uint64) uint64 {
		p, err := Build(spec, env)
		if err != nil {
			t.Fatal(err)
		}
		m := p.(*Readahead)
		var size uint64
		m.OnDecision(func(d *RADecision) { size = d.After.Size })
		m.Read(file, 0, req, func(*Request) {})
		return size
	}
	for _, c := range []struct {
		spec      string
		file      uint32
		req, want uint64
	}{
		{"readahead", 1, 64, 32},   // unknown device: 128 KiB, io_pages = ra_pages
		{"readahead", 2, 64, 128},  // read_ahead_kb 512
		{"readahead", 3, 200, 200}, // oversized read up to io_pages 256
		{"readahead", 3, 300, 256},
		{"readahead:kb=256", 2, 64, 64},       // explicit kb wins over the device
		{"readahead:io_kb=0", 3, 200, 32},     // explicit io_kb 0: io_pages = ra_pages
		{"readahead:kb=256", 3, 300, 256},     // device io_pages with an explicit kb
		{"readahead:kb=64,io_kb=64", 3, 4, 8}, // both explicit
		{"readahead:io_kb=2048", 2, 300, 300}, // the device's ra_pages 128, explicit io_pages 512
		{"readahead:io_kb=2048", 2, 600, 512},
	} {
		if got := firstWindow(c.spec, c.file, c.req); got != c.want {
			t.Errorf("%s, file %d, %d-page read: window %d pages, want %d", c.spec, c.file, c.req, got, c.want)
		}
	}
}

func TestReadaheadSpecKernel(t *testing.T) {
	var warnings []string
	env := Env{Warn: func(m string) { warnings = append(warnings, m) }}
	for _, c := range []struct {
		spec, envKernel string
		want            KernelVersion
	}{
		{"readahead:kernel=6.1", "6.18.44", KernelVersion{6, 1}},
		{"readahead", "6.12.117+deb12-cloud-amd64", KernelVersion{6, 12}},
		{"readahead:kernel=auto", "6.1.0-57-cloud-amd64", KernelVersion{6, 1}},
		{"readahead", "", RunningKernel()},
	} {
		env.Kernel = c.envKernel
		p, err := Build(c.spec, env)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if got := p.(*Readahead).Kernel(); got != c.want && c.want != (KernelVersion{}) {
			t.Errorf("%s with Env.Kernel %q: kernel %v, want %v", c.spec, c.envKernel, got, c.want)
		}
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	env.Kernel = "synthetic"
	if _, err := Build("readahead", env); err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], `"synthetic"`) {
		t.Errorf("unknown bundle kernel: err %v, warnings %v", err, warnings)
	}
	if _, err := Build("readahead:kernel=soon", env); err == nil || !strings.Contains(err.Error(), "kernel") {
		t.Errorf("kernel=soon: %v", err)
	}
}

// TestReadaheadNextMiss61 checks Linux 6.1's page_cache_next_miss, which
// returns the last index it looked at, not one past it, when it finds no
// gap: a marked page followed by ra_pages cached ones still gets a window
// there; on 6.12 the same hit is too far from the gap and reads nothing.
func TestReadaheadNextMiss61(t *testing.T) {
	for _, c := range []struct {
		kernel KernelVersion
		want   []raWin
	}{
		{KernelVersion{6, 1}, []raWin{{RAAsync, 10, 42, 32, 32}}},
		{KernelVersion{6, 12}, []raWin{{RAAsync, 10, 0, 0, 0}}},
	} {
		m, ws := raRecorder(ReadaheadConfig{Kernel: c.kernel, RAPages: 32, Folios: FoliosSmall, FilePages: func(uint32) uint64 { return 1000 }})
		f := m.file(1)
		for p := uint64(0); p < 100; p++ {
			m.insert(f, p, 0, p == 10)
		}
		m.Read(1, 10, 1, func(*Request) {})
		if !slices.Equal(*ws, c.want) {
			t.Errorf("Linux %v: windows %v, want %v", c.kernel, *ws, c.want)
		}
	}
}
