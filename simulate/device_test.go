package simulate

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

func TestPresetsMatchPaperThroughput(t *testing.T) {
	want := map[string]float64{
		"nvme":     1.26 * (1 << 30),
		"sata-ssd": 240 * (1 << 20),
		"hdd":      1.34 * (1 << 20),
	}
	for name, bps := range want {
		d, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		// Closed form.
		if got := d.RandReadBytesPerSec(); math.Abs(got-bps)/bps > 0.001 {
			t.Errorf("%s: model random-read throughput %.0f B/s, want %.0f", name, got, bps)
		}
		// Saturate the queue with 4 KiB requests and time them.
		s := newDeviceState(d, 4096)
		const n = 20000
		var last int64
		for i := 0; i < n; i++ {
			last = s.submit(0, 1)
		}
		got := float64(n) * 4096 / (float64(last) / 1e9)
		if math.Abs(got-bps)/bps > 0.01 {
			t.Errorf("%s: %d queued 4 KiB reads took %v: %.0f B/s, want %.0f", name, n, time.Duration(last), got, bps)
		}
	}
}

func TestDeviceLatencyAndBandwidth(t *testing.T) {
	d := Device{LatencyNS: 100_000, BytesPerSec: 4096e6, QueueDepth: 2} // 1 µs per page
	s := newDeviceState(d, 4096)
	if done := s.submit(1000, 1); done != 1000+100_000+1000 {
		t.Fatalf("QD1 read done at %d, want %d", done, 1000+100_000+1000)
	}
	// A second request in parallel overlaps latency but shares the channel.
	if done := s.submit(1000, 10); done != 1000+100_000+1000+10_000 {
		t.Fatalf("parallel read done at %d, want %d", done, 1000+100_000+1000+10_000)
	}
	// A third waits for a slot.
	if done := s.submit(1000, 1); done != 102_000+100_000+1000 {
		t.Fatalf("queued read done at %d, want %d", done, 102_000+100_000+1000)
	}
}

func TestDeviceFromProfile(t *testing.T) {
	p := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 70_000, SeqReadBytesPerSec: 1e9, QueueDepth: 32}
	d, err := DeviceFromProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.LatencyNS != 70_000-4096 || d.QueueDepth != 32 || d.Name != "vda" {
		t.Fatalf("device %+v", d)
	}
	// The QD1 latency, random-read throughput at QD 32 and sequential
	// bandwidth measured here (bench device, 2026-12-01, 15:49): the
	// model keeps the latency, reaches the random throughput at full
	// depth, and queues requests behind each other in between: 4 at once
	// take 35 µs on average (bench engine measured 40 µs at QD4), where
	// the model of 4 parallel requests took the QD1 latency, 26 µs.
	vda := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 25536,
		RandReadBytesPerSec: 690947700.7, SeqReadBytesPerSec: 1042106129.4, QueueDepth: 32}
	dv, err := DeviceFromProfile(vda)
	if err != nil {
		t.Fatal(err)
	}
	if got := dv.RandReadBytesPerSec(); math.Abs(got-vda.RandReadBytesPerSec)/vda.RandReadBytesPerSec > 0.01 {
		t.Errorf("model %+v: random-read throughput %.0f B/s at full depth, measured %.0f", dv, got, vda.RandReadBytesPerSec)
	}
	if got := newDeviceState(dv, 4096).submit(0, 1); math.Abs(float64(got)-float64(vda.ReadLatencyNS)) > 1 {
		t.Errorf("model %+v: a QD1 read takes %d ns, measured %d", dv, got, vda.ReadLatencyNS)
	}
	st := newDeviceState(dv, 4096)
	var sum int64
	for range 4 {
		sum += st.submit(0, 1)
	}
	if mean := float64(sum) / 4; mean < 1.2*float64(vda.ReadLatencyNS) || mean > 1.8*float64(vda.ReadLatencyNS) {
		t.Errorf("model %+v: 4 reads at once take %.0f ns on average, want 1.2 to 1.8 times the QD1 latency (measured 40 µs at QD4)", dv, mean)
	}
	bad := *p
	bad.QueueDepth = 0
	if _, err := DeviceFromProfile(&bad); err == nil || !strings.Contains(err.Error(), "queue_depth") {
		t.Fatalf("queue depth 0: err %v, want one naming queue_depth", err)
	}
	bad = *p
	bad.Version = 9
	if _, err := DeviceFromProfile(&bad); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("version 9: err %v, want one naming version", err)
	}
}

// TestDeviceQueueCurve checks that a device built from a profile's queue
// curve serves each depth at its measured throughput: k submitters, each
// submitting again when its read completes, as k threads of synchronous
// reads or an engine at depth k do. The curve is the one bench device
// measured here (2026-12-01 17:38 UTC, io_uring O_DIRECT); the model
// without it (QD1 latency plus a channel fitted to QD32) served QD4 at
// 139 K IOPS, measured 91 K.
func TestDeviceQueueCurve(t *testing.T) {
	curve := []formats.QueuePoint{{QD: 1, IOPS: 33778}, {QD: 2, IOPS: 61276}, {QD: 4, IOPS: 91010},
		{QD: 8, IOPS: 120714}, {QD: 16, IOPS: 146809}, {QD: 32, IOPS: 162592}}
	p := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 28900,
		RandReadBytesPerSec: 162592 * 4096, SeqReadBytesPerSec: 1069e6, QueueDepth: 32, Queue: curve}
	d, err := DeviceFromProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.QueueLatencyNS) != 32 || d.RequestNS != 0 || d.LatencyNS != d.QueueLatencyNS[0] {
		t.Fatalf("device %+v: want 32 queue latencies, the first as LatencyNS, no request time", d)
	}
	iops := func(k int) float64 {
		s := newDeviceState(d, 4096)
		next := make([]int64, k) // each submitter's next submission
		const per = 2000
		var end int64
		for range per {
			for j := range next {
				next[j] = s.submit(next[j], 1)
				end = max(end, next[j])
			}
		}
		return float64(k*per) / float64(end) * 1e9
	}
	for _, pt := range curve {
		if got := iops(pt.QD); math.Abs(got-pt.IOPS)/pt.IOPS > 0.05 {
			t.Errorf("depth %d: the model serves %.0f IOPS, measured %.0f", pt.QD, got, pt.IOPS)
		}
	}
	// Between measured depths it interpolates: QD3 lies between QD2 and QD4.
	if got := iops(3); got < 61276 || got > 91010 {
		t.Errorf("depth 3: the model serves %.0f IOPS, want between QD2's 61 K and QD4's 91 K", got)
	}
	for _, c := range []struct {
		name  string
		edit  func(q []formats.QueuePoint)
		field string
	}{
		{"first depth 2", func(q []formats.QueuePoint) { q[0].QD = 2 }, "queue[0].qd"},
		{"depths out of order", func(q []formats.QueuePoint) { q[3].QD = 4 }, "queue[3].qd"},
		{"depth past queue_depth", func(q []formats.QueuePoint) { q[5].QD = 64 }, "queue[5].qd"},
		{"zero IOPS", func(q []formats.QueuePoint) { q[2].IOPS = 0 }, "queue[2].iops"},
		{"NaN IOPS", func(q []formats.QueuePoint) { q[1].IOPS = math.NaN() }, "queue[1].iops"},
	} {
		bad := *p
		bad.Queue = slices.Clone(curve)
		c.edit(bad.Queue)
		if _, err := DeviceFromProfile(&bad); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err %v, want one naming %s", c.name, err, c.field)
		}
	}
}

// TestDeviceSyncCurve: demand reads (submitSync) follow the profile's
// synchronous curve, prefetches (submit) the queue curve, from the same
// state. The curves are of one bench device run here (2026-12-01 18:27
// UTC): four threads of pread got 61 K IOPS where one io_uring submitter
// at depth 4 got 90 K; past two threads the two vCPUs' wake-ups bound
// them.
func TestDeviceSyncCurve(t *testing.T) {
	queue := []formats.QueuePoint{{QD: 1, IOPS: 35739}, {QD: 2, IOPS: 60921}, {QD: 4, IOPS: 90188},
		{QD: 8, IOPS: 123429}, {QD: 16, IOPS: 148950}, {QD: 32, IOPS: 163501}}
	sync := []formats.QueuePoint{{QD: 1, IOPS: 37077}, {QD: 2, IOPS: 59620}, {QD: 4, IOPS: 60818}, {QD: 8, IOPS: 60327}}
	p := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 28900,
		RandReadBytesPerSec: 162592 * 4096, SeqReadBytesPerSec: 1069e6, QueueDepth: 32, Queue: queue, SyncQueue: sync}
	d, err := DeviceFromProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	iops := func(k int, sync bool) float64 {
		s := newDeviceState(d, 4096)
		next := make([]int64, k)
		var end int64
		for range 2000 {
			for j := range next {
				if sync {
					next[j] = s.submitSync(next[j], 1)
				} else {
					next[j] = s.submit(next[j], 1)
				}
				end = max(end, next[j])
			}
		}
		return float64(k*2000) / float64(end) * 1e9
	}
	for _, pt := range sync {
		if got := iops(pt.QD, true); math.Abs(got-pt.IOPS)/pt.IOPS > 0.05 {
			t.Errorf("%d threads: the model serves %.0f IOPS, measured %.0f", pt.QD, got, pt.IOPS)
		}
	}
	if got := iops(4, false); math.Abs(got-90188)/90188 > 0.05 {
		t.Errorf("depth 4, prefetches: the model serves %.0f IOPS, the queue curve 90 K", got)
	}
	// Past the curve's 8 threads the throughput holds at 60 K.
	if got := iops(16, true); math.Abs(got-60327)/60327 > 0.05 {
		t.Errorf("16 threads: the model serves %.0f IOPS, want the last point's 60 K", got)
	}
	bad := *p
	bad.SyncQueue = []formats.QueuePoint{{QD: 1, IOPS: 33000}, {QD: 1, IOPS: 50000}}
	if _, err := DeviceFromProfile(&bad); err == nil || !strings.Contains(err.Error(), "sync_queue[1].qd") {
		t.Errorf("repeated depth: err %v, want one naming sync_queue[1].qd", err)
	}
	// Without a queue curve the synchronous one is not used.
	old := *p
	old.Queue = nil
	if d, err := DeviceFromProfile(&old); err != nil || d.SyncLatencyNS != nil {
		t.Errorf("no queue curve: device %+v, err %v; want no synchronous latencies", d, err)
	}
}

// TestThreadsWaitOnSyncCurve: four threads of cold one-page reads, each
// waiting for its own, take the synchronous curve's time in a whole run,
// on both demand paths (the readahead baseline's and a plain lane's):
// 4000 reads at 60.8 K IOPS, where the queue curve alone serves them at
// 90.2 K.
func TestThreadsWaitOnSyncCurve(t *testing.T) {
	p := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 28900,
		SeqReadBytesPerSec: 1069e6, QueueDepth: 32,
		Queue: []formats.QueuePoint{{QD: 1, IOPS: 35739}, {QD: 2, IOPS: 60921}, {QD: 4, IOPS: 90188},
			{QD: 8, IOPS: 123429}, {QD: 16, IOPS: 148950}, {QD: 32, IOPS: 163501}},
		SyncQueue: []formats.QueuePoint{{QD: 1, IOPS: 37077}, {QD: 2, IOPS: 59620}, {QD: 4, IOPS: 60818}, {QD: 8, IOPS: 60327}}}
	withSync, err := DeviceFromProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	p.SyncQueue = nil
	queueOnly, err := DeviceFromProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	// Thread i reads pages i, i+4, i+8, ... of a 1 Mi-page file, the four
	// submitting together; rows without service times (gaps of 0).
	var evs []policies.Event
	for k := range 1000 {
		for th := range uint32(4) {
			evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: 1e9, PID: 1, TID: 10 + th, File: 1,
				Access: policies.FileAccess{Kind: formats.KindRead, Page: uint64(k*4+int(th)) * 97 % (1 << 20), NPages: 1}})
		}
	}
	for _, noRA := range []bool{false, true} {
		wall := func(d Device) float64 {
			cfg := Config{CacheBytes: 1 << 34, Device: d, NoReadahead: noRA}
			cfg.Env.FilePages = func(uint32) uint64 { return 1 << 20 }
			r, err := Run(cfg, &SliceSource{Events: evs})
			if err != nil {
				t.Fatal(err)
			}
			return float64(r.Lane(BaselineName).WallNS)
		}
		ws, wq := wall(withSync), wall(queueOnly)
		if !noRA {
			r, err := Run(Config{CacheBytes: 1 << 20, Device: withSync, Calibrated: true}, &SliceSource{Events: evs[:4]})
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Join(r.Notes, "\n"); !strings.Contains(n, "queue curve: 28 µs alone, 44 µs with 3 others") || !strings.Contains(n, "from threads of pread: 28 µs alone, 66 µs with 3 others") {
				t.Errorf("notes %q do not give the curves' latencies", n)
			}
		}
		if want := 4000 / 60818.0 * 1e9; math.Abs(ws-want)/want > 0.1 {
			t.Errorf("no readahead %v: 4 threads' 4000 reads take %.1f ms with the synchronous curve, want about %.1f ms", noRA, ws/1e6, want/1e6)
		}
		if want := 4000 / 90188.0 * 1e9; math.Abs(wq-want)/want > 0.1 {
			t.Errorf("no readahead %v: 4 threads' 4000 reads take %.1f ms with the queue curve alone, want about %.1f ms", noRA, wq/1e6, want/1e6)
		}
	}
}

// TestIdleLatency: with an idle curve, a request that starts after the
// device idled takes the curve's extra latency for that gap (interpolated
// between points), one right after another or beside one in flight none,
// and without a curve none either.
func TestIdleLatency(t *testing.T) {
	base := Device{Name: "d", LatencyNS: 50_000, BytesPerSec: 4096e9, QueueDepth: 2,
		QueueLatencyNS: []int64{50_000, 50_000}}
	idle := base
	var err error
	idle.Idle, err = idleCosts([]formats.IdlePoint{{GapNS: 0, P50NS: 50_000}, {GapNS: 1e6, P50NS: 60_000}, {GapNS: 10e6, P50NS: 150_000}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		d         Device
		at        int64 // the second request's start; the first completes at about 50 µs
		inFlight  bool  // a third request is in flight at its start
		wantExtra int64
	}{
		{"back to back", idle, 50_001, false, 0},
		{"after 5.5 ms idle", idle, 5_550_001, false, 55_000},
		{"after 100 ms idle", idle, 100_050_001, false, 100_000},
		{"beside one in flight", idle, 5_550_001, true, 0},
		{"no curve", base, 5_550_001, false, 0},
	} {
		s := newDeviceState(c.d, 4096)
		first := s.submit(0, 1)
		if c.inFlight {
			s.submit(c.at-10_000, 1)
		}
		done := s.submit(c.at, 1)
		extra := done - c.at - (first - 0)
		if d := extra - c.wantExtra; d < -1_000 || d > 1_000 {
			t.Errorf("%s: the request took %d ns more than the first, want %d", c.name, extra, c.wantExtra)
		}
	}
	if _, err := idleCosts([]formats.IdlePoint{{GapNS: 5, P50NS: 1}, {GapNS: 5, P50NS: 2}}); err == nil {
		t.Error("idle gaps that do not ascend were accepted")
	}
	// The largest points a profile may hold: no overflow between them.
	big, err := idleCosts([]formats.IdlePoint{{GapNS: 0, P50NS: 1}, {GapNS: 10e9, P50NS: 10e9}})
	if err != nil {
		t.Fatal(err)
	}
	if x := idleExtra(big, 9e9); x < 8.9e9 || x > 9.1e9 {
		t.Errorf("extra latency %d ns 9 s into a 10 s span rising to 10 s, want about 9 s", x)
	}
}

// TestSyncCurveTakesQD1 checks that the synchronous curve's one-thread
// point is the queue curve's QD1 point (the same measurement over a longer
// phase) and that its other points stay.
func TestSyncCurveTakesQD1(t *testing.T) {
	p := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 58240,
		SeqReadBytesPerSec: 3e9, QueueDepth: 32,
		Queue:     []formats.QueuePoint{{QD: 1, IOPS: 16607, P50NS: 58240}, {QD: 32, IOPS: 212954}},
		SyncQueue: []formats.QueuePoint{{QD: 1, IOPS: 21867, P50NS: 41088}, {QD: 2, IOPS: 32521}, {QD: 8, IOPS: 39756}}}
	d, err := DeviceFromProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	xfer := 4096 / p.SeqReadBytesPerSec * 1e9
	if got, want := float64(d.SyncLatencyNS[0]), 1e9/16607-xfer; math.Abs(got-want) > 1 {
		t.Errorf("one thread: %v ns, want the QD1 point's %.0f", got, want)
	}
	if got, want := float64(d.SyncLatencyNS[1]), 2e9/32521-xfer; math.Abs(got-want) > 1 {
		t.Errorf("two threads: %v ns, want the synchronous curve's %.0f", got, want)
	}
	if p.SyncQueue[0].IOPS != 21867 {
		t.Errorf("the profile's own curve changed: %+v", p.SyncQueue[0])
	}
}

// TestColdReadRate checks that a profile's measured rate of uncached
// reads through the page cache sets the channel's transfer rate, and that
// a profile without it keeps the sequential O_DIRECT rate.
func TestColdReadRate(t *testing.T) {
	host := &formats.HostCosts{CPUs: 2, CachedReadNS: 1400, ColdReadNS: 61000, ColdReadDirectNS: 58000, OpenNS: 900,
		Prefetch: []formats.PrefetchCost{{Pages: 1, NS: 5000}}, PrefetchCachedNS: 1000, PrefetchBusyNS: 6000, BusySlowdown: 1.4,
		ColdReadBytesPerSec: 1.2e9}
	p := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 58000,
		SeqReadBytesPerSec: 3e9, QueueDepth: 32, Host: host,
		Queue: []formats.QueuePoint{{QD: 1, IOPS: 16600}, {QD: 32, IOPS: 213000}}}
	d, err := DeviceFromProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.BytesPerSec != 1.2e9 || d.DirectBytesPerSec != 3e9 {
		t.Errorf("transfer rate %v B/s, O_DIRECT %v; want the uncached rate 1.2e9 and the sequential 3e9", d.BytesPerSec, d.DirectBytesPerSec)
	}
	// A 1024-page read: QD1 latency plus 4 MiB less a page at 1.2 GB/s.
	want := 1e9/16600 + float64(1023*4096)/1.2e9*1e9
	if got := float64(d.LatencyNS) + 1024*4096/d.BytesPerSec*1e9; math.Abs(got-want)/want > 0.01 {
		t.Errorf("a 1024-page read takes %.0f ns in the model, want about %.0f", got, want)
	}
	host.ColdReadBytesPerSec = 0
	if d, err = DeviceFromProfile(p); err != nil || d.BytesPerSec != 3e9 {
		t.Errorf("without the uncached rate: %v B/s (%v), want the sequential 3e9", d.BytesPerSec, err)
	}
	host.ColdReadBytesPerSec = math.Inf(1)
	if _, err := DeviceFromProfile(p); err == nil || !strings.Contains(err.Error(), "cold_read_bytes_per_sec") {
		t.Errorf("an infinite rate: %v, want an error naming the field", err)
	}
}
