package simulate

import (
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate/simtest"
)

// threadReads returns threads × n one-page reads of distinct pages, the
// i-th read of every thread at the same timestamp, think ns apart.
func threadReads(threads, n int, think uint64) []policies.Event {
	var evs []policies.Event
	for i := 0; i < n; i++ {
		for th := 0; th < threads; th++ {
			evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: uint64(i) * think, PID: 1, TID: uint32(100 + th), File: uint32(th),
				Access: policies.FileAccess{Kind: formats.KindRead, Page: uint64(i), NPages: 1}})
		}
	}
	return evs
}

// TestThreadsOverlapOnOneDevice: 8 threads with 100 independent misses
// each, at the same timestamps, on a QD-32 device: every thread waits for
// its own reads only, which overlap on the device, so the lane's wall time
// is about one thread's (the eight 4 KiB transfers of a step share the
// channel); the stall summed over threads is eight times one thread's.
// With one clock for all threads (the old model) the wall would be the
// sum, about eight times longer.
func TestThreadsOverlapOnOneDevice(t *testing.T) {
	nvme := Presets["nvme"]
	run := func(threads int) *Stats {
		cfg := Config{CacheBytes: 1 << 30, Device: nvme, NoReadahead: true}
		r, err := Run(cfg, &SliceSource{Events: threadReads(threads, 100, 1000)})
		if err != nil {
			t.Fatal(err)
		}
		if r.Threads != threads {
			t.Fatalf("report has %d threads, want %d", r.Threads, threads)
		}
		return r.Lane(BaselineName)
	}
	one, eight := run(1), run(8)
	if one.Misses != 100 || eight.Misses != 800 {
		t.Fatalf("misses %d and %d, want 100 and 800", one.Misses, eight.Misses)
	}
	if r := float64(eight.WallNS) / float64(one.WallNS); r > 1.1 {
		t.Errorf("8 threads' wall %d ns is %.2f× one thread's %d ns; concurrent misses must overlap on the QD-32 device", eight.WallNS, r, one.WallNS)
	}
	if r := float64(eight.StallNS) / float64(one.StallNS); r < 7.5 || r > 8.8 {
		t.Errorf("stall summed over threads: %d ns, %.2f× one thread's; want about 8×", eight.StallNS, r)
	}
	// A QD-1 device serializes them again: the wall grows about 8×.
	qd1 := nvme
	qd1.QueueDepth = 1
	cfg := Config{CacheBytes: 1 << 30, Device: qd1, NoReadahead: true}
	r, err := Run(cfg, &SliceSource{Events: threadReads(8, 100, 1000)})
	if err != nil {
		t.Fatal(err)
	}
	if w := r.Lane(BaselineName).WallNS; float64(w) < 7*float64(one.WallNS) {
		t.Errorf("QD 1: wall %d ns, want about 8× one thread's %d (the device is the bottleneck)", w, one.WallNS)
	}
}

// TestThinkTimeFromServiceTimes: with end_ns, think time runs from an
// operation's recorded end to the thread's next start, and the recorded
// service time is replaced by the simulated one, so nothing is counted
// twice. Three reads, recorded start/end (µs): 0/100 (a cold read), 150/151
// (a hit), 300/400 (cold): think times 50 and 149 µs. Simulated on a
// 10 µs device with an empty cache: every read misses and takes 10 µs plus
// a 1 ns transfer, so the wall is 10 + 50 + 10 + 149 + 10 µs (and 3 ns).
func TestThinkTimeFromServiceTimes(t *testing.T) {
	dev := Device{Name: "10us", LatencyNS: 10_000, BytesPerSec: 4096e9, QueueDepth: 4}
	us := uint64(1000)
	evs := []policies.Event{}
	for i, se := range [][2]uint64{{0, 100}, {150, 151}, {300, 400}} {
		evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: 1e9 + se[0]*us, PID: 1, TID: 1, File: 1,
			Access: policies.FileAccess{Kind: formats.KindRead, Page: uint64(10 * i), NPages: 1, End: 1e9 + se[1]*us, Op: uint64(i + 1)}})
	}
	r, err := Run(Config{CacheBytes: 1 << 20, Device: dev, NoReadahead: true}, &SliceSource{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	b := r.Lane(BaselineName)
	if r.ThinkTime != ThinkServiceTimes || len(r.Notes) != 0 {
		t.Errorf("think time %q, notes %q; want service_times and no caveat", r.ThinkTime, r.Notes)
	}
	if want := int64(199 * us); b.ThinkNS != want {
		t.Errorf("think %d ns, want %d", b.ThinkNS, want)
	}
	// One row without (the kernel's own read, outside a system call) is
	// not a bundle without service times: no advice to record again.
	mixed := append([]policies.Event{{Kind: policies.EventFileAccess, TS: 1e9 - 50*us, PID: 1, TID: 1, File: 1,
		Access: policies.FileAccess{Kind: formats.KindRead, Page: 99, NPages: 1}}}, evs...)
	rm, err := Run(Config{CacheBytes: 1 << 20, Device: dev, NoReadahead: true, Env: policies.Env{Kernel: "6.18.0"}}, &SliceSource{Events: mixed})
	if err != nil {
		t.Fatal(err)
	}
	if rm.ThinkTime != ThinkMixed || len(rm.Notes) != 1 || !strings.Contains(rm.Notes[0], "1 of 4") || strings.Contains(rm.Notes[0], "record the program again") {
		t.Errorf("one untimed row of four: think time %q, notes %q; want mixed, saying which rows, without the advice for bundles lacking service times", rm.ThinkTime, rm.Notes)
	}
	if want := int64(199*us + 3*10_001); b.WallNS != want {
		t.Errorf("wall %d ns, want %d (think plus simulated service)", b.WallNS, want)
	}
	// The same rows without end_ns: think time is the gap between starts,
	// which holds the recorded service times, and the report says so.
	for i := range evs {
		evs[i].Access.End = 0
	}
	cfg := Config{CacheBytes: 1 << 20, Device: dev, NoReadahead: true}
	cfg.Env.Kernel = "6.18.44-fc"
	r, err = Run(cfg, &SliceSource{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	if b := r.Lane(BaselineName); b.WallNS != int64(300*us+3*10_001) || r.ThinkTime != ThinkGaps || len(r.Notes) != 1 {
		t.Errorf("gaps: wall %d, think time %q, notes %q; want %d, gaps and the caveat", b.WallNS, r.ThinkTime, r.Notes, 300*us+3*10_001)
	}
	if n := strings.Join(r.Notes, " "); !strings.Contains(n, "Linux 6.18.44-fc") || !strings.Contains(n, "twice") {
		t.Errorf("the caveat of a recorded bundle without service times must name its kernel and the double count: %q", n)
	}
	// Speed 2 halves think times (ends 1 ns after starts); NoThink drops
	// them.
	for i := range evs {
		evs[i].Access.End = evs[i].TS + 1
	}
	for _, tc := range []struct {
		cfg  Config
		want int64
	}{{Config{Speed: 2}, int64((300*us-2)/2) + 3*10_001}, {Config{NoThink: true}, 3 * 10_001}} {
		tc.cfg.CacheBytes, tc.cfg.Device, tc.cfg.NoReadahead = 1<<20, dev, true
		r, err := Run(tc.cfg, &SliceSource{Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		if w := r.Lane(BaselineName).WallNS; math.Abs(float64(w-tc.want)) > 2 {
			t.Errorf("speed %v nothink %v: wall %d, want %d", tc.cfg.Speed, tc.cfg.NoThink, w, tc.want)
		}
	}
}

// TestOperationRowsAndMetadata: rows of one operation (same op: a read
// split over several rows, a fault retried) continue it without think
// time; a metadata row (open) costs its recorded duration, which the
// device model does not serve.
func TestOperationRowsAndMetadata(t *testing.T) {
	dev := Device{Name: "10us", LatencyNS: 10_000, BytesPerSec: 4096e9, QueueDepth: 4}
	ev := func(kind formats.AccessKind, ts, end, op, page uint64) policies.Event {
		return policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: 1,
			Access: policies.FileAccess{Kind: kind, Page: page, NPages: 1, End: end, Op: op}}
	}
	evs := []policies.Event{
		ev(formats.KindOpen, 0, 30_000, 1, 0),         // open: 30 µs
		ev(formats.KindRead, 40_000, 90_000, 2, 0),    // read, row 1: think 10 µs
		ev(formats.KindRead, 40_000, 90_000, 2, 1),    // row 2 of the same read: no think
		ev(formats.KindRead, 100_000, 110_000, 3, 50), // think 10 µs
	}
	r, err := Run(Config{CacheBytes: 1 << 20, Device: dev, NoReadahead: true}, &SliceSource{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	b := r.Lane(BaselineName)
	if b.ThinkNS != 20_000 || b.ServiceNS != 30_000 {
		t.Errorf("think %d, recorded service %d; want 20000 and 30000", b.ThinkNS, b.ServiceNS)
	}
	if want := int64(30_000 + 20_000 + 3*10_001); b.WallNS != want {
		t.Errorf("wall %d, want %d", b.WallNS, want)
	}
}

// TestDeviceOutOfOrder: requests submitted after later ones, as threads'
// clocks allow, use the channel time those left idle, and spill over gaps.
func TestDeviceOutOfOrder(t *testing.T) {
	d := Device{LatencyNS: 100, BytesPerSec: 4096e9 / 10, QueueDepth: 8} // 10 ns per page
	s := newDeviceState(d, 4096)
	if done := s.submit(1000, 10); done != 1000+100+100 { // channel busy [1100, 1200)
		t.Fatalf("first: %d", done)
	}
	if done := s.submit(0, 5); done != 100+50 { // before it: [100, 150)
		t.Fatalf("earlier request: done %d, want 150", done)
	}
	// [900, 1100) idle for 200 ns of the needed 300: the rest after 1200.
	if done := s.submit(800, 30); done != 1200+100 {
		t.Fatalf("spilling request: done %d, want 1300", done)
	}
	if done := s.submit(2000, 1); done != 2110 {
		t.Fatalf("in-order request: done %d, want 2110", done)
	}
	want := []span{{100, 150}, {900, 1100}, {1100, 1300}, {2100, 2110}}
	if !reflect.DeepEqual(s.busy, want) {
		t.Fatalf("channel spans %v, want %v", s.busy, want)
	}
}

// TestPlainFastPathMatches: lanes without policies serve one-page demand
// accesses inline (lane.plain); the reports must equal those of the
// general path on random multi-threaded streams with every kind of row.
func TestPlainFastPathMatches(t *testing.T) {
	defer func() { plainFastPath = true }()
	curved, err := DeviceFromProfile(&formats.DeviceProfile{Version: formats.DeviceProfileVersion, ReadLatencyNS: 28900, SeqReadBytesPerSec: 1069e6, QueueDepth: 32,
		Queue:     []formats.QueuePoint{{QD: 1, IOPS: 35739}, {QD: 4, IOPS: 90188}, {QD: 32, IOPS: 163501}},
		SyncQueue: []formats.QueuePoint{{QD: 1, IOPS: 37077}, {QD: 2, IOPS: 59620}, {QD: 8, IOPS: 60327}}})
	if err != nil {
		t.Fatal(err)
	}
	for seed := int64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewSource(seed))
		var evs []policies.Event
		ts := uint64(0)
		// Seeds above 8: one thread's one-page reads of one file, the
		// runs the flat loop serves, on a device with queue curves.
		plain := seed > 8
		for i := 0; i < 20000; i++ {
			if plain {
				ts += uint64(rng.Intn(10_000)) // 5 µs apart on average: the device queues
				ev := policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: 1,
					Access: policies.FileAccess{Kind: formats.KindRead, Page: uint64(rng.Intn(5000)), NPages: 1}}
				evs = append(evs, ev)
				continue
			}
			ts += uint64(rng.Intn(50_000))
			ev := policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: uint32(rng.Intn(4)), File: uint32(rng.Intn(3))}
			kinds := []formats.AccessKind{formats.KindRead, formats.KindRead, formats.KindRead, formats.KindFault, formats.KindMap, formats.KindCacheAdd, formats.KindOpen}
			ev.Access = policies.FileAccess{Kind: kinds[rng.Intn(len(kinds))], Page: uint64(rng.Intn(5000)), NPages: uint32(rng.Intn(3))}
			if rng.Intn(2) == 0 {
				ev.Access.End, ev.Access.Op = ts+uint64(rng.Intn(100_000)), uint64(i/2)
			}
			if rng.Intn(30) == 0 {
				ev.Kind = policies.EventTreeChildEnter
			}
			evs = append(evs, ev)
		}
		cfg := Config{
			CacheBytes:  int64(4096 * (16 + rng.Intn(3000))),
			CacheModel:  CacheModel(seed % 2),
			Device:      Presets[PresetNames()[seed%3]],
			NoReadahead: true,
		}
		if plain || seed%4 == 0 {
			cfg.Device = curved
		}
		if seed%3 == 0 {
			cfg.Env.FilePages = func(f uint32) uint64 { return 3000 + 1000*uint64(f) }
		}
		var reports [2]*Report
		for i, fast := range []bool{true, false} {
			plainFastPath = fast
			r, err := Run(cfg, &SliceSource{Events: evs})
			if err != nil {
				t.Fatal(err)
			}
			reports[i] = r
		}
		if !reflect.DeepEqual(reports[0].Policies, reports[1].Policies) {
			t.Errorf("seed %d: fast path differs:\n%+v\ngeneral:\n%+v", seed, reports[0].Policies, reports[1].Policies)
		}
		if b := reports[0].Policies[0]; b.Hits == 0 || b.Misses == 0 || b.ThinkNS == 0 {
			t.Errorf("seed %d: degenerate stream: %+v", seed, b)
		}
	}
}

// TestServiceTimesFromBundle: a format 1.1 bundle's end_ns and op reach
// the thread clocks through the bundle reader: the three reads of
// TestThinkTimeFromServiceTimes, written to a bundle, give its wall time.
func TestServiceTimesFromBundle(t *testing.T) {
	us := uint64(1000)
	b := &simtest.Bundle{Files: []formats.File{{ID: 1, Path: "/data/f", Size: 1 << 20}}}
	for i, se := range [][2]uint64{{0, 100}, {150, 151}, {300, 400}} {
		b.Accesses = append(b.Accesses, formats.Access{TS: 1e9 + se[0]*us, EndNS: 1e9 + se[1]*us, Op: uint64(i + 1), PID: 1, TID: 1,
			FileID: 1, FirstPage: uint64(10 * i), NPages: 1, Kind: formats.KindRead})
	}
	dir := simtest.Write(t, "timed", b)
	dev := Device{Name: "10us", LatencyNS: 10_000, BytesPerSec: 4096e9, QueueDepth: 4}
	r := runBundle(t, dir, Config{CacheBytes: 1 << 20, Device: dev, NoReadahead: true})
	if b := r.Lane(BaselineName); r.ThinkTime != ThinkServiceTimes || b.ThinkNS != int64(199*us) || b.WallNS != int64(199*us+3*10_001) {
		t.Errorf("think time %q, think %d, wall %d; want service_times, %d, %d", r.ThinkTime, b.ThinkNS, b.WallNS, 199*us, 199*us+3*10_001)
	}
}
