package simulate

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// nextPage prefetches page p+1 on every access to p.
type nextPage struct{ req policies.Request }

func (*nextPage) Accepts(k policies.EventKind) bool { return k == policies.EventFileAccess }

func (n *nextPage) Handle(ev *policies.Event, emit policies.Emit) {
	n.req.File = ev.File
	n.req.Ranges = append(n.req.Ranges[:0], policies.Range{First: ev.Access.Page + 1, N: 1})
	emit(&n.req)
}

func testBuild(spec string, env policies.Env) (policies.Policy, error) {
	switch spec {
	case "next":
		return &nextPage{}, nil
	}
	return policies.Build(spec, env)
}

func reads(file uint32, think uint64, pages ...uint64) []policies.Event {
	evs := make([]policies.Event, len(pages))
	for i, p := range pages {
		evs[i] = policies.Event{Kind: policies.EventFileAccess, TS: uint64(i) * think, File: file,
			Access: policies.FileAccess{Kind: formats.KindRead, Page: p, NPages: 1}}
	}
	return evs
}

// testDevice: 100 µs latency, 1 ns per page transfer, queue depth 4.
var testDevice = Device{Name: "test", LatencyNS: 100_000, BytesPerSec: 4096e9, QueueDepth: 4}

func TestPrefetchTimingLateAndStall(t *testing.T) {
	pages := make([]uint64, 10)
	for i := range pages {
		pages[i] = uint64(i)
	}
	for _, tc := range []struct {
		think     uint64
		late      uint64
		stall     int64
		baseStall int64
	}{
		// Think time longer than the device: every prefetch lands in
		// time; only the first access stalls (its demand read queues
		// behind the prefetch of page 1 on the channel: 100 µs + 2 ns).
		{think: 200_000, late: 0, stall: 100_002, baseStall: 10 * 100_001},
		// Think time half the device latency: the prefetch of page 2,
		// issued at access 1, is still in flight at access 2, which waits
		// 50 µs + 1 ns for the remainder. Page 3 was prefetched when access
		// 2 arrived, before that wait, so it lands exactly when access 3
		// comes: accesses 2, 4, 6 and 8 are late, 3, 5, 7 and 9 are not.
		{think: 50_000, late: 4, stall: 100_002 + 4*50_001, baseStall: 10 * 100_001},
	} {
		t.Run(fmt.Sprint(tc.think), func(t *testing.T) {
			cfg := Config{CacheBytes: 1 << 20, Device: testDevice, NoReadahead: true, Policies: []string{"next"}, Build: testBuild}
			r, err := Run(cfg, &SliceSource{Events: reads(1, tc.think, pages...)})
			if err != nil {
				t.Fatal(err)
			}
			base, next := r.Lane(BaselineName), r.Lane("next")
			if base.Misses != 10 || base.Hits != 0 || base.StallNS != tc.baseStall || base.PagesRead != 10 {
				t.Errorf("baseline %+v", *base)
			}
			want := Stats{Accesses: 10, Demand: 10, Hits: 9, Misses: 1, Prefetched: 10, Used: 9 - tc.late, Late: tc.late, Wasted: 1, PagesRead: 11, Requests: 11, StallNS: tc.stall, ThinkNS: int64(9 * tc.think)}
			got := *next
			got.Name, got.Spec, got.Coverage, got.Accuracy, got.IOAmplification, got.WallNS, got.Speedup = "", "", 0, 0, 0, 0, 0
			got.PredictedWallNS, got.PredictedSpeedup = 0, 0
			if !reflect.DeepEqual(got, want) {
				t.Errorf("next:\n got %+v\nwant %+v", got, want)
			}
			if next.Coverage != 0.9 || next.Accuracy != 0.9 || next.IOAmplification != 1.1 {
				t.Errorf("next: coverage %v accuracy %v io_amp %v, want 0.9 0.9 1.1", next.Coverage, next.Accuracy, next.IOAmplification)
			}
			span := int64(9 * tc.think)
			if next.WallNS != span+tc.stall || base.WallNS != span+tc.baseStall {
				t.Errorf("wall %d and baseline wall %d, want span plus stall: %d and %d", next.WallNS, base.WallNS, span+tc.stall, span+tc.baseStall)
			}
			if want := float64(span+tc.baseStall) / float64(span+tc.stall); next.Speedup != want || next.PredictedSpeedup != want {
				t.Errorf("speedup %v, want %v", next.Speedup, want)
			}
		})
	}
}

func TestWastedPrefetchesAreCounted(t *testing.T) {
	// Cache of 2 pages; "next" prefetches p+1 but the trace reads every
	// other page, so every prefetch is evicted unused.
	cfg := Config{CacheBytes: 2 * 4096, Device: testDevice, NoReadahead: true, Policies: []string{"next"}, Build: testBuild}
	r, err := Run(cfg, &SliceSource{Events: reads(1, 1e6, 0, 2, 4, 6, 8, 10)})
	if err != nil {
		t.Fatal(err)
	}
	n := r.Lane("next")
	if n.Misses != 6 || n.Prefetched != 6 || n.Used+n.Late != 0 || n.Wasted != 6 || n.WastedEvicted < 4 {
		t.Errorf("next %+v", *n)
	}
	if n.Coverage != 0 || n.Accuracy != 0 || n.IOAmplification != 2 {
		t.Errorf("coverage %v accuracy %v io_amp %v, want 0 0 2", n.Coverage, n.Accuracy, n.IOAmplification)
	}
}

func TestNonDemandKindsAreSkipped(t *testing.T) {
	evs := reads(1, 1000, 0, 1, 2)
	evs[1].Access.Kind = formats.KindCacheAdd
	evs[2].Access.Kind = formats.KindReadaheadSync
	cfg := Config{CacheBytes: 1 << 20, Device: testDevice, NoReadahead: true}
	r, err := Run(cfg, &SliceSource{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	if r.Events != 3 || r.Policies[0].Demand != 1 {
		t.Errorf("events %d demand %d, want 3 and 1", r.Events, r.Policies[0].Demand)
	}
}

func TestEndOfFileClipsRequests(t *testing.T) {
	cfg := Config{CacheBytes: 1 << 20, Device: testDevice, NoReadahead: true, Policies: []string{"next"}, Build: testBuild}
	cfg.Env.FilePages = func(uint32) uint64 { return 3 }
	r, err := Run(cfg, &SliceSource{Events: reads(1, 1e6, 0, 1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Lane("next"); n.Prefetched != 2 || n.Wasted != 0 || n.Accuracy != 1 {
		t.Errorf("next %+v: the prefetch of page 3 (EOF) must be clipped", *n)
	}
}

func TestReportJSONKeys(t *testing.T) {
	cfg := Config{CacheBytes: 1 << 20, Device: testDevice, NoReadahead: true, Policies: []string{"next"}, Build: testBuild}
	r, err := Run(cfg, &SliceSource{Events: reads(1, 1e6, 0, 1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"events", "events_per_sec", "policies"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON report lacks %q: %s", k, b)
		}
	}
	p := m["policies"].([]any)[1].(map[string]any)
	for _, k := range []string{"name", "coverage", "accuracy", "pages_used_in_time", "pages_late", "pages_wasted", "io_amplification",
		"stall_ns", "wall_ns", "speedup", "predicted_wall_ns", "predicted_speedup"} {
		if _, ok := p[k]; !ok {
			t.Errorf("JSON policy lacks %q: %s", k, b)
		}
	}
	for _, k := range []string{"used", "late", "wasted", "unused", "runtime_ns"} {
		if _, ok := p[k]; ok {
			t.Errorf("JSON policy still has the old key %q", k)
		}
	}
	if _, ok := m["predicted_calibrated"]; !ok {
		t.Errorf("JSON report lacks predicted_calibrated")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := New(Config{Device: testDevice}); err == nil || !strings.Contains(err.Error(), "cache") {
		t.Errorf("zero cache: err %v", err)
	}
	if _, err := New(Config{CacheBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "device") {
		t.Errorf("zero device: err %v", err)
	}
	cfg := Config{CacheBytes: 1 << 20, Device: testDevice, NoReadahead: true}
	evs := reads(1, 1, 1<<41)
	if _, err := Run(cfg, &SliceSource{Events: evs}); err == nil || !strings.Contains(err.Error(), "page") {
		t.Errorf("page 2^41: err %v", err)
	}
	evs = reads(1, 1, 5)
	evs[0].Access.NPages = 1 << 31
	if _, err := Run(cfg, &SliceSource{Events: evs}); err == nil || !strings.Contains(err.Error(), "npages") {
		t.Errorf("npages 2^31: err %v", err)
	}
	evs = reads(1<<24, 1, 5)
	if _, err := Run(cfg, &SliceSource{Events: evs}); err == nil || !strings.Contains(err.Error(), "file_id") {
		t.Errorf("file 2^24: err %v", err)
	}
}

func TestAssertions(t *testing.T) {
	r := &Report{Policies: []Stats{{Name: "baseline"}, {Name: "tree", Coverage: 0.75}}}
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{"tree.coverage>=0.8", false},
		{"tree.coverage >= 0.7", true},
		{"tree.coverage<0.8", true},
		{"baseline.coverage==0", true},
	} {
		a, err := ParseAssertion(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		_, ok, err := a.Check(r)
		if err != nil || ok != tc.ok {
			t.Errorf("%s: ok %v err %v, want %v", tc.expr, ok, err, tc.ok)
		}
	}
	for _, bad := range []string{"tree.coverage", "tree.bogus>=1", "coverage>=1", "tree.coverage>=x"} {
		if _, err := ParseAssertion(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	a, _ := ParseAssertion("markov.coverage>=0.5")
	if _, _, err := a.Check(r); err == nil || !strings.Contains(err.Error(), "markov") {
		t.Errorf("missing lane: err %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64MiB": 64 << 20, "1GiB": 1 << 30, "1G": 1 << 30, "1.5GiB": 3 << 29, "2MB": 2e6, "512k": 512 << 10} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1MiB", "1XB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
	if s := FormatSize(256 << 20); s != "256MiB" {
		t.Errorf("FormatSize = %q", s)
	}
}

// TestStepAllocatesNothing: once the cache and the readahead state have
// seen the pages, replaying events allocates nothing, so memory grows with
// distinct pages, not with events.
func TestStepAllocatesNothing(t *testing.T) {
	evs := benchEvents("seq", 1<<14)
	cfg := Config{CacheBytes: 4 << 20, Device: Presets["nvme"]}
	cfg.Env.FilePages = func(uint32) uint64 { return 1 << 16 }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		s.Step(&evs[i])
	}
	i := 0
	allocs := testing.AllocsPerRun(20000, func() {
		ev := &evs[i%len(evs)]
		ev.TS += uint64(len(evs)) * 2000
		s.Step(ev)
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per event", allocs)
	}
}

// TestInvariantsRandomStreams runs random event streams (every access kind,
// hints, several files, both cache models, tiny to large caches) through
// every built-in policy but markov and checks the accounting identities.
func TestInvariantsRandomStreams(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewSource(seed))
		var evs []policies.Event
		var fut []policies.FutureAccess
		ts := uint64(0)
		for i := 0; i < 3000; i++ {
			ts += uint64(rng.Intn(200_000))
			ev := policies.Event{TS: ts, File: uint32(rng.Intn(3)), PID: 1}
			switch r := rng.Intn(10); {
			case r < 7:
				ev.Kind = policies.EventFileAccess
				ev.Access = policies.FileAccess{Kind: formats.AccessKind(1 + rng.Intn(8)), Page: uint64(rng.Intn(600)), NPages: uint32(rng.Intn(4))}
				if rng.Intn(3) == 0 && i > 0 { // runs of sequential reads
					ev.Access = policies.FileAccess{Kind: formats.KindRead, Page: uint64(i % 500), NPages: 1}
				}
				if policies.IsDemand(ev.Access.Kind) {
					fut = append(fut, policies.FutureAccess{File: ev.File, Page: ev.Access.Page, NPages: ev.Access.NPages})
				}
			case r < 9:
				ev.Kind = policies.EventTreeChildEnter
				for c := rng.Intn(20); c > 0; c-- {
					ev.Tree.Children = append(ev.Tree.Children, uint64(rng.Intn(700)))
				}
			default:
				ev.Kind = policies.EventTensorLayout
				ev.Tensor = policies.TensorLayout{Name: fmt.Sprint(rng.Intn(5)), Offset: uint64(rng.Intn(2 << 20)), Length: uint64(rng.Intn(1 << 20))}
			}
			evs = append(evs, ev)
		}
		cfg := Config{
			CacheBytes: int64(4096 * (1 + rng.Intn(800))),
			CacheModel: CacheModel(seed % 2),
			Device:     Presets[PresetNames()[seed%3]],
			Policies:   []string{"stride", "tree:window=8", "tensor", "readahead:kb=512"},
			Oracle:     true,
		}
		cfg.Env.FilePages = func(uint32) uint64 { return 512 }
		cfg.Env.Future = policies.NewFuture(fut)
		r, err := Run(cfg, &SliceSource{Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		if r.Lane("tree").Prefetched == 0 || r.Lane("oracle").Used == 0 || r.Lane(BaselineName).Demand == 0 {
			t.Errorf("seed %d: degenerate stream: %+v", seed, r.Policies)
		}
		for _, st := range r.Policies {
			if st.Hits+st.Misses != st.Demand || st.Used+st.Late+st.Wasted != st.Prefetched || st.WastedEvicted > st.Wasted ||
				st.StallNS < 0 || st.Coverage > 1 || st.PagesRead < st.Prefetched || st.WallNS < st.ThinkNS {
				t.Errorf("seed %d cache %d %v: %s breaks an identity: %+v", seed, cfg.CacheBytes, cfg.CacheModel, st.Name, st)
			}
		}
	}
}

// TestMapRowsAreDemand: fault-around map rows are demand, like replay
// re-issues them. A map row of 16 pages into an empty cache is 16 misses,
// read on demand as one 16-page request; it triggers no readahead (the
// kernel maps only pages already cached), so no more than those 16 pages
// are read. Mapping them again is 16 hits. The same row as a fault instead
// takes the readaround path and reads a whole window (more than 16 pages),
// which shows the readahead model is on.
func TestMapRowsAreDemand(t *testing.T) {
	ev := func(kind formats.AccessKind, ts uint64) policies.Event {
		return policies.Event{Kind: policies.EventFileAccess, TS: ts, File: 1,
			Access: policies.FileAccess{Kind: kind, Page: 100, NPages: 16}}
	}
	cfg := Config{CacheBytes: 1 << 20, Device: testDevice}
	cfg.Env.FilePages = func(uint32) uint64 { return 1000 }
	r, err := Run(cfg, &SliceSource{Events: []policies.Event{ev(formats.KindMap, 0), ev(formats.KindMap, 1e6)}})
	if err != nil {
		t.Fatal(err)
	}
	b := r.Lane(BaselineName)
	if b.Accesses != 2 || b.Demand != 32 || b.Misses != 16 || b.Hits != 16 || b.PagesRead != 16 || b.Requests != 1 || b.Prefetched != 0 {
		t.Errorf("map rows: %+v; want 2 accesses, 32 demand pages, 16 misses, 16 hits, 16 pages read in 1 request, nothing prefetched", *b)
	}
	r, err = Run(cfg, &SliceSource{Events: []policies.Event{ev(formats.KindFault, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if b := r.Lane(BaselineName); b.Misses != 16 || b.PagesRead <= 16 {
		t.Errorf("fault: %+v; want 16 misses and a readaround window of more than 16 pages read", *b)
	}
}

// TestOracleLaneOnce: asking for the oracle as a policy does not add a
// second, identical oracle lane (issue 15); a different oracle spec is a
// lane of its own, named by its spec.
func TestOracleLaneOnce(t *testing.T) {
	fut := policies.NewFuture([]policies.FutureAccess{{File: 1, Page: 0, NPages: 1}})
	for _, tc := range []struct {
		policies []string
		oracle   string
		want     []string
	}{
		{[]string{"oracle"}, "", []string{BaselineName, "oracle"}},
		{[]string{"oracle", "oracle"}, "", []string{BaselineName, "oracle"}},
		{[]string{"oracle:n=8"}, "oracle:n=8", []string{BaselineName, "oracle"}},
		{[]string{"oracle:n=8"}, "", []string{BaselineName, "oracle:n=8", "oracle"}},
		{[]string{"next"}, "", []string{BaselineName, "next", "oracle"}},
		{[]string{"next", "next "}, "", []string{BaselineName, "next", "oracle"}},
	} {
		cfg := Config{CacheBytes: 1 << 20, Device: testDevice, Policies: tc.policies, Oracle: true, OracleSpec: tc.oracle, Build: testBuild}
		cfg.Env.Future = fut
		r, err := Run(cfg, &SliceSource{Events: reads(1, 1000, 0)})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range r.Policies {
			names = append(names, p.Name)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("policies %q, oracle %q: lanes %q, want %q", tc.policies, tc.oracle, names, tc.want)
		}
	}
}
