package simulate

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate/simtest"
)

// peakHeap runs fn and returns the most heap in use, sampled every 5 ms,
// above what was in use before.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak uint64
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			mu.Lock()
			peak = max(peak, m.HeapInuse)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(done)
	mu.Lock()
	defer mu.Unlock()
	if peak < base {
		return 0
	}
	return peak - base
}

// TestHugeReadsStayBounded: a bundle of 100 000 reads of 1 MiB each (a
// 550 KB bundle naming 25.6 M pages) simulated with the oracle: its
// future is streamed, so it never holds more than a horizon of pages (a
// materialized one held all 25.6 M, 205 MB), and the heap stays far below
// the 674 MB such a bundle once took. (Readahead is off to keep the test
// short; it adds per-page state of one byte.)
func TestHugeReadsStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 25.6 M pages")
	}
	const n = 100_000
	b := &simtest.Bundle{Files: []formats.File{{ID: 1, Path: "/data/big", Size: n * 1 << 20}}}
	for i := 0; i < n; i++ {
		b.Accesses = append(b.Accesses, formats.Access{TS: uint64(i) * 10_000, PID: 1, TID: 1, FileID: 1, FirstPage: uint64(i) * 256, NPages: 256, Kind: formats.KindRead})
	}
	dir := simtest.Write(t, "big", b)
	var r *Report
	var held uint64
	peak := peakHeap(func() {
		in, err := OpenInput(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		cfg := Config{CacheBytes: 256 << 20, Device: Presets["nvme"], Oracle: true, NoReadahead: true, PageSize: in.PageSize, Env: in.Env()}
		src, err := in.Source()
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		s, err := newSimulator(cfg, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.run(src); err != nil {
			t.Fatal(err)
		}
		r = s.Report()
		held = s.lanes[1].futureHeld
	})
	if limit := uint64(policies.DefaultHorizon + 2<<16 + 256); held == 0 || held > limit {
		t.Errorf("the oracle's future held up to %d pages, want at most %d", held, limit)
	}
	if o := r.Lane("oracle"); o == nil || o.Demand != n*256 || o.Misses >= r.Policies[0].Misses {
		t.Fatalf("oracle lane %+v; want all %d pages demanded and fewer misses than the baseline", o, n*256)
	}
	t.Logf("peak heap %.1f MB", float64(peak)/1e6)
	if peak > 150e6 {
		t.Errorf("peak heap %.1f MB for 25.6 M demanded pages; the future must be streamed", float64(peak)/1e6)
	}
}

// TestHostileNPagesRefused: a 41-row bundle whose rows claim 2^24 pages
// each (a corrupt or hostile npages) is refused at once, with an error
// naming the row, the file and the field, instead of simulating 687 M
// pages for a minute.
func TestHostileNPagesRefused(t *testing.T) {
	b := &simtest.Bundle{Files: []formats.File{{ID: 3, Path: "/data/hostile", Size: 1 << 30}}}
	for i := 0; i < 41; i++ {
		b.Accesses = append(b.Accesses, formats.Access{TS: uint64(i), PID: 1, TID: 1, FileID: 3, FirstPage: 0, NPages: 1 << 24, Kind: formats.KindRead})
	}
	b.Accesses[0].NPages = 1
	dir := simtest.Write(t, "hostile", b)
	in, err := OpenInput(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	src, err := in.Source()
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	cfg := Config{CacheBytes: 256 << 20, Device: Presets["nvme"], Oracle: true, PageSize: in.PageSize, Env: in.Env()}
	_, err = Run(cfg, src)
	if err == nil {
		t.Fatal("simulated a bundle of 2^24-page reads")
	}
	for _, want := range []string{"row 1", "file_id 3 /data/hostile", "field npages is 16777216", "MAX_RW_COUNT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
