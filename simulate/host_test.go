package simulate

import (
	"cmp"
	"encoding/json"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// testHost is a host model whose costs are round numbers: a 1-page
// prefetch request takes 10 µs, nothing slows anything.
func testHost() *Host {
	return &Host{Issue: []IssueCost{{1, 10_000}, {4, 16_000}, {32, 72_000}},
		IssueCachedNS: 1_000, IssueBusy: 1, Slowdown: 1}
}

// timedReads returns n one-page reads of distinct random pages of file 1
// by one thread, each recorded with a 1 µs service time and think µs of
// think time after it.
func timedReads(n int, think uint64, seed int64) []policies.Event {
	rng := rand.New(rand.NewSource(seed))
	var evs []policies.Event
	ts := uint64(1e9)
	for i, p := range rng.Perm(1 << 20)[:n] {
		evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: 1,
			Access: policies.FileAccess{Kind: formats.KindRead, Page: uint64(p), NPages: 1, End: ts + 1000, Op: uint64(i + 1)}})
		ts += 1000 + think*1000
	}
	return evs
}

// withRepeat appends the same reads again, later: every page then hits.
func withRepeat(evs []policies.Event) []policies.Event {
	out := append([]policies.Event{}, evs...)
	shift := evs[len(evs)-1].TS + 1e6 - evs[0].TS
	for _, ev := range evs {
		ev.TS += shift
		ev.Access.End += shift
		ev.Access.Op += uint64(len(evs))
		out = append(out, ev)
	}
	return out
}

func runHost(t *testing.T, host *Host, evs []policies.Event, mod func(*Config)) *Report {
	t.Helper()
	dev := Device{Name: "20us", LatencyNS: 20_000, BytesPerSec: 4096e9, QueueDepth: 32, Host: host}
	cfg := Config{CacheBytes: 1 << 34, Device: dev, NoReadahead: true, Oracle: true}
	if mod != nil {
		mod(&cfg)
	}
	r, err := Run(cfg, &SliceSource{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHostIssuerBoundsOracle: a program that reads 4000 random pages 1 µs
// apart cannot be faster with the oracle than the backend issues its
// requests, one page each, 10 µs apiece: without the host model the
// oracle's wall is the think time alone, with it about 40 ms (less the
// few pages the program reads itself before the backend gets to them). The
// baseline, which prefetches nothing, is the same with and without.
func TestHostIssuerBoundsOracle(t *testing.T) {
	evs := timedReads(4000, 1, 1)
	free := runHost(t, nil, evs, nil)
	h := testHost()
	h.OpenNS = 5_000
	bound := runHost(t, h, evs, nil)
	fo, bo := free.Lane("oracle"), bound.Lane("oracle")
	if fo.WallNS > 12e6 {
		t.Errorf("without a host model the oracle's wall is %d ns, want about the 8 ms of think and service", fo.WallNS)
	}
	if bo.WallNS < 35e6 {
		t.Errorf("with 10 µs per request the oracle's wall is %d ns, want about 4000 × 10 µs", bo.WallNS)
	}
	if fb, bb := free.Lane(BaselineName), bound.Lane(BaselineName); fb.WallNS != bb.WallNS {
		t.Errorf("baseline wall %d ns with the host model, %d without: it issues nothing", bb.WallNS, fb.WallNS)
	}
	if bo.Prefetched < 3900 || bo.PagesDropped != 0 {
		t.Errorf("oracle prefetched %d pages, dropped %d; want all 4000 issued", bo.Prefetched, bo.PagesDropped)
	}
	// Its backend was busy 10 µs a request, and opened the file once, at
	// the warm OpenNS (the program never opened it).
	if bo.BackendBusyNS < 3900*10_000 || bo.BackendOpenNS != h.OpenNS {
		t.Errorf("the backend was busy %d ns, opening %d ns; want at least 3900 × 10 µs, and one open of %d ns", bo.BackendBusyNS, bo.BackendOpenNS, h.OpenNS)
	}
	if fo.BackendBusyNS != 0 {
		t.Errorf("without a host model the backend was busy %d ns, want none modelled", fo.BackendBusyNS)
	}
	if !strings.Contains(strings.Join(bound.Notes, " "), "host costs from the profile") {
		t.Errorf("notes %q do not say what the host model charged", bound.Notes)
	}
}

// TestHostReadCosts: with service times, every read served from the cache
// costs HitNS and every miss MissNS beyond the device: 500 misses then
// 500 hits make the baseline 500 × (3 + 2) µs longer, exactly.
func TestHostReadCosts(t *testing.T) {
	evs := withRepeat(timedReads(500, 5, 2))
	h := testHost()
	h.HitNS, h.MissNS = 2_000, 3_000
	none := runHost(t, nil, evs, nil).Lane(BaselineName)
	with := runHost(t, h, evs, nil).Lane(BaselineName)
	if none.Misses != 500 || none.Hits != 500 {
		t.Fatalf("%d misses and %d hits, want 500 and 500", none.Misses, none.Hits)
	}
	if d := with.WallNS - none.WallNS; d != 500*5_000 {
		t.Errorf("the host model added %d ns to the wall, want %d", d, 500*5_000)
	}
	if with.CachedReadNS != 500*2_000 {
		t.Errorf("cached_read_ns %d, want %d", with.CachedReadNS, 500*2_000)
	}
	// Without service times (gaps) a hit's copy is inside the recorded gap.
	for i := range evs {
		evs[i].Access.End = 0
	}
	if g := runHost(t, h, evs, nil).Lane(BaselineName); g.CachedReadNS != 0 {
		t.Errorf("rows without service times were charged %d ns of cached reads", g.CachedReadNS)
	}
}

// TestHostContention: while the backend issues, the program's think time
// runs Slowdown slower, and the backend's requests IssueBusy slower while
// the program computes; both make the oracle's run longer.
func TestHostContention(t *testing.T) {
	evs := timedReads(2000, 8, 3)
	calm := runHost(t, testHost(), evs, nil).Lane("oracle")
	h := testHost()
	h.Slowdown, h.IssueBusy = 1.5, 1.4
	busy := runHost(t, h, evs, nil).Lane("oracle")
	if calm.ContentionNS != 0 || busy.ContentionNS == 0 {
		t.Errorf("contention %d ns without slowdown, %d with; want 0 and more", calm.ContentionNS, busy.ContentionNS)
	}
	if busy.WallNS <= calm.WallNS {
		t.Errorf("oracle wall %d ns with contention, %d without; want longer", busy.WallNS, calm.WallNS)
	}
}

// TestHostQueueBound: the backend's queue holds at most InFlight pages;
// an oracle 64 pages ahead of a backend that holds 4 has requests dropped.
func TestHostQueueBound(t *testing.T) {
	evs := timedReads(1000, 1, 4)
	if d := runHost(t, testHost(), evs, nil).Lane("oracle").PagesDropped; d != 0 {
		t.Errorf("default bound: %d pages dropped", d)
	}
	small := runHost(t, testHost(), evs, func(c *Config) { c.InFlight = 4 }).Lane("oracle")
	if small.PagesDropped == 0 {
		t.Errorf("InFlight 4: nothing dropped (prefetched %d)", small.Prefetched)
	}
}

func TestIssueNS(t *testing.T) {
	h := testHost()
	for _, c := range []struct {
		n    uint64
		want int64
	}{{1, 10_000}, {2, 12_000}, {4, 16_000}, {18, 44_000}, {32, 72_000}, {64, 136_000}} {
		if got := h.issueNS(c.n); got != c.want {
			t.Errorf("issueNS(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestHostFromProfile: the host model is built from a profile's measured
// costs, and a bad field is named.
func TestHostFromProfile(t *testing.T) {
	good := func() *formats.HostCosts {
		return &formats.HostCosts{CPUs: 2, CachedReadNS: 1300, CachedReadPageNS: 500, ColdReadNS: 28_000, ColdReadDirectNS: 26_000,
			Prefetch: []formats.PrefetchCost{{Pages: 1, NS: 10_000}, {Pages: 32, NS: 70_000}}, PrefetchCachedNS: 2500,
			PrefetchBusyNS: 14_000, BusySlowdown: 1.5, OpenNS: 3000, AdviseNS: 40_000}
	}
	h, err := HostFromProfile(good())
	if err != nil {
		t.Fatal(err)
	}
	if h.MissNS != 2_000 || h.HitNS != 1300 || h.IssueBusy != 1.4 || h.Slowdown != 1.5 || h.OpenNS != 3000 || h.AdviseDelayNS != 30_000 {
		t.Errorf("host model %+v", h)
	}
	if h, err := HostFromProfile(nil); h != nil || err != nil {
		t.Errorf("no host costs: %v, %v; want nil, nil", h, err)
	}
	for _, c := range []struct {
		field string
		mod   func(*formats.HostCosts)
	}{
		{"host.cpus", func(h *formats.HostCosts) { h.CPUs = 0 }},
		{"host.prefetch has 0", func(h *formats.HostCosts) { h.Prefetch = nil }},
		{"host.prefetch[1]", func(h *formats.HostCosts) { h.Prefetch[1].Pages = 1 }},
		{"host.prefetch starts at 4", func(h *formats.HostCosts) { h.Prefetch[0].Pages = 4; h.Prefetch[1].Pages = 8 }},
		{"busy_slowdown", func(h *formats.HostCosts) { h.BusySlowdown = 0.5 }},
		{"prefetch_busy_ns", func(h *formats.HostCosts) { h.PrefetchBusyNS = 0 }},
		{"cold_read_ns", func(h *formats.HostCosts) { h.ColdReadNS = 1e12 }},
		{"advise_ns", func(h *formats.HostCosts) { h.AdviseNS = 2e9 }},
	} {
		p := good()
		c.mod(p)
		if _, err := HostFromProfile(p); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v", c.field, err)
		}
	}
}

// FuzzDeviceProfile: any profile JSON is refused with an error or builds a
// model whose simulation of an oracle over random reads ends, without a
// panic, and with a wall time that is not negative.
func FuzzDeviceProfile(f *testing.F) {
	f.Add([]byte(`{"version":1,"read_latency_ns":26000,"randread_bytes_per_sec":6e8,"seqread_bytes_per_sec":1e9,"queue_depth":32,
		"host":{"cpus":2,"cached_read_ns":1300,"cached_read_page_ns":500,"cold_read_ns":28000,"cold_read_direct_ns":26000,"open_ns":3600,
		"prefetch":[{"pages":1,"ns":9600},{"pages":4,"ns":17700},{"pages":32,"ns":63500},{"pages":256,"ns":153500}],
		"prefetch_cached_ns":2400,"prefetch_busy_ns":12800,"busy_slowdown":1.55,"prefetch_wake_ns":67900,"submit_wake_ns":8100}}`))
	f.Add([]byte(`{"version":1,"read_latency_ns":1,"seqread_bytes_per_sec":1e-300,"queue_depth":1,"host":{"cpus":1,"prefetch":[{"pages":1,"ns":1000000000}],"prefetch_busy_ns":1000000000,"busy_slowdown":100}}`))
	f.Add([]byte(`{"version":1,"read_latency_ns":29000,"seqread_bytes_per_sec":1e9,"queue_depth":32,
		"queue":[{"qd":1,"iops":33778},{"qd":2,"iops":61276},{"qd":4,"iops":91010},{"qd":8,"iops":120714},{"qd":16,"iops":146809},{"qd":32,"iops":162592}],
		"sync_queue":[{"qd":1,"iops":37077},{"qd":2,"iops":59620},{"qd":4,"iops":60818},{"qd":8,"iops":60327}]}`))
	f.Add([]byte(`{"version":1,"read_latency_ns":29000,"seqread_bytes_per_sec":1e9,"queue_depth":2,
		"queue":[{"qd":1,"iops":33778},{"qd":2,"iops":61276}],
		"idle":[{"gap_ns":0,"p50_ns":50000},{"gap_ns":200000,"p50_ns":93000},{"gap_ns":5000000,"p50_ns":195000},{"gap_ns":10000000000,"p50_ns":10000000000}]}`))
	evs := withRepeat(timedReads(200, 1, 5))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p formats.DeviceProfile
		if json.Unmarshal(b, &p) != nil {
			return
		}
		d, err := DeviceFromProfile(&p)
		if err != nil {
			return
		}
		r, err := Run(Config{CacheBytes: 1 << 30, Device: d, Oracle: true}, &SliceSource{Events: evs})
		if err != nil {
			t.Fatalf("a valid profile's model failed: %v (%+v)", err, d)
		}
		for _, l := range r.Policies {
			if l.WallNS < 0 || l.StallNS < 0 {
				t.Fatalf("lane %s: wall %d, stall %d ns (%+v, host %+v)", l.Name, l.WallNS, l.StallNS, d, d.Host)
			}
		}
	})
}

// TestHostAdviseDelay: the kernel runs a FADVISE a while after the
// backend issues it, and a page enters the cache only then: a program
// that reads each page 1 ms before the oracle's FADVISE of it lands reads
// the pages itself, and the late FADVISEs read nothing again.
func TestHostAdviseDelay(t *testing.T) {
	evs := timedReads(2000, 5, 5)
	prompt := runHost(t, testHost(), evs, nil).Lane("oracle")
	h := testHost()
	h.AdviseDelayNS = 50e6 // every FADVISE lands long after its page's demand
	late := runHost(t, h, evs, nil).Lane("oracle")
	if prompt.Misses > 200 {
		t.Errorf("FADVISEs run at once: %d of 2000 pages missed, want few", prompt.Misses)
	}
	if late.Misses < 1900 {
		t.Errorf("FADVISEs 50 ms late: %d of 2000 pages missed, want nearly all read by the program", late.Misses)
	}
	if late.PagesRead > 2000+50 || late.Prefetched > 100 {
		t.Errorf("FADVISEs 50 ms late read %d pages, %d of them prefetched; want the program's 2000 only: they skip cached pages", late.PagesRead, late.Prefetched)
	}
	if late.WallNS <= prompt.WallNS {
		t.Errorf("oracle wall %d ns with late FADVISEs, %d with prompt ones; want longer", late.WallNS, prompt.WallNS)
	}
	// The delays drawn average the mean, and the time from request to
	// FADVISE holds them.
	if mean := float64(late.AdviseDelayNS) / float64(late.Advised); mean < 40e6 || mean > 60e6 || late.PipelineNS < late.AdviseDelayNS {
		t.Errorf("%d FADVISEs, delays %.0f ns on average (want about 50 ms), pipeline %d ns in all", late.Advised, mean, late.PipelineNS)
	}
}

// TestHostMapRowsFree: a map row's pages were mapped by its fault's
// fault-around, so the program touches them without a copy: a cached map
// row costs no cached read, a cached read row does.
func TestHostMapRowsFree(t *testing.T) {
	row := func(ts uint64, k formats.AccessKind, op uint64) policies.Event {
		return policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: 1,
			Access: policies.FileAccess{Kind: k, Page: 0, NPages: 16, End: ts + 1000, Op: op}}
	}
	h := testHost()
	h.HitNS, h.HitPageNS = 2_000, 500
	for _, c := range []struct {
		kind formats.AccessKind
		want int64
	}{{formats.KindMap, 0}, {formats.KindRead, 2_000 + 15*500}} {
		evs := []policies.Event{row(1e9, formats.KindRead, 1), row(1e9+1e6, c.kind, 2)}
		l := runHost(t, h, evs, nil).Lane(BaselineName)
		// The first read misses (no copy charged beyond the device's).
		if l.CachedReadNS != c.want {
			t.Errorf("a cached %v row of 16 pages charged %d ns of cached reads, want %d", c.kind, l.CachedReadNS, c.want)
		}
	}
}

// TestPerKind: with Config.PerKind each lane reports its modelled times
// per kind of operation; for one thread, its first operation's start plus
// every kind's service and think times is the lane's wall.
func TestPerKind(t *testing.T) {
	evs := timedReads(300, 5, 7)
	for i := range evs {
		if i%3 == 0 { // an open before every third read
			ev := evs[i]
			ev.Access.Kind, ev.Access.NPages = formats.KindOpen, 0
			ev.TS -= 500
			ev.Access.End = ev.TS + 300
			evs = append(evs, ev)
		}
	}
	slices.SortStableFunc(evs, func(a, b policies.Event) int { return cmp.Compare(a.TS, b.TS) })
	r := runHost(t, testHost(), evs, func(c *Config) { c.PerKind = true })
	for _, l := range r.Policies {
		var sum int64
		kinds := map[string]int64{}
		for _, k := range l.Kinds {
			sum += k.ServiceNS + k.ThinkNS
			kinds[k.Kind] = k.Ops
		}
		if kinds["read"] != 300 || kinds["open"] != 100 {
			t.Errorf("lane %s: kinds %+v, want 300 reads and 100 opens", l.Name, l.Kinds)
		}
		if sum > l.WallNS || l.WallNS-sum > 1_000_000 {
			t.Errorf("lane %s: service and think %d ns, wall %d ns: want the wall less the first start (1 ms at most)", l.Name, sum, l.WallNS)
		}
	}
	if r := runHost(t, testHost(), evs, nil); len(r.Policies[0].Kinds) != 0 {
		t.Errorf("per-kind times without Config.PerKind: %+v", r.Policies[0].Kinds)
	}
}
