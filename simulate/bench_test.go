package simulate

import (
	"math/rand"
	"syscall"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// benchEvents returns n one-page reads: "seq" scans 16 files of 64 Ki pages
// in turn (every page is new to a 64 Ki-page cache: one insert and one
// eviction per event); "random" reads uniformly random pages of the same
// files (a quarter hit); "hot" scans the first 1 Ki pages of each file in
// turn, a working set that fits the cache (all hits after warm-up).
func benchEvents(pattern string, n int) []policies.Event {
	const files, filePages = 16, 1 << 16
	rng := rand.New(rand.NewSource(1))
	evs := make([]policies.Event, n)
	for i := range evs {
		var f uint32
		var p uint64
		switch pattern {
		case "hot":
			f = uint32(i/1024) % files
			p = uint64(i % 1024)
		case "seq":
			f = uint32(i/filePages) % files
			p = uint64(i % filePages)
		default:
			f = uint32(rng.Intn(files))
			p = uint64(rng.Intn(filePages))
		}
		evs[i] = policies.Event{Kind: policies.EventFileAccess, TS: uint64(i) * 2000, File: f,
			Access: policies.FileAccess{Kind: formats.KindRead, Page: p, NPages: 1}}
	}
	return evs
}

func benchmarkSim(b *testing.B, pattern string, cfg Config) {
	evs := benchEvents(pattern, 1<<21)
	cfg.Device = Presets["nvme"]
	cfg.CacheBytes = 256 << 20 // 64 Ki pages: a quarter of the data
	cfg.Env.FilePages = func(uint32) uint64 { return 1 << 16 }
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	// Warm the cache and the model with one pass.
	for i := range evs {
		s.Step(&evs[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		ev := &evs[i&(len(evs)-1)]
		ev.TS += uint64(len(evs)) * 2000 // one pass later than last time
		if err := s.Step(ev); err != nil {
			b.Fatal(err)
		}
	}
	reportRates(b, uint64(b.N), cpuTime()-cpu0)
}

// cpuTime returns the process's user plus system CPU time. On a shared
// machine it measures the simulator's own work even when other processes
// take the cores; the wall-clock rate is reported next to it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportRates(b *testing.B, events uint64, cpu time.Duration) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds()/1e6, "Mevents/s")
	if cpu > 0 {
		b.ReportMetric(float64(events)/cpu.Seconds()/1e6, "Mevents/cpu-s")
	}
}

// BenchmarkLRUReadahead is the speed target: LRU cache plus the readahead
// baseline, one lane.
func BenchmarkLRUReadahead(b *testing.B) {
	for _, pattern := range []string{"hot", "seq", "random"} {
		b.Run(pattern, func(b *testing.B) { benchmarkSim(b, pattern, Config{}) })
	}
}

// BenchmarkLRUNoReadahead measures the cache and device model alone.
func BenchmarkLRUNoReadahead(b *testing.B) {
	for _, pattern := range []string{"seq", "random"} {
		b.Run(pattern, func(b *testing.B) { benchmarkSim(b, pattern, Config{NoReadahead: true}) })
	}
}

// BenchmarkTwoListReadahead uses the active/inactive cache.
func BenchmarkTwoListReadahead(b *testing.B) {
	for _, pattern := range []string{"seq", "random"} {
		b.Run(pattern, func(b *testing.B) { benchmarkSim(b, pattern, Config{CacheModel: TwoList}) })
	}
}

// BenchmarkBundle replays a synthetic bundle from disk: reading, merging
// and simulating with the LRU cache and the readahead baseline. ns/op is
// per event.
func BenchmarkBundle(b *testing.B) {
	for _, pattern := range []string{"seq", "random"} {
		b.Run(pattern, func(b *testing.B) {
			dir := b.TempDir() + "/bundle"
			const events = 1 << 20
			if err := formats.Synth(dir, formats.SynthSpec{Pattern: pattern, Events: events, Files: 16}); err != nil {
				b.Fatal(err)
			}
			in, err := OpenInput(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer in.Close()
			cfg := Config{CacheBytes: 256 << 20, Device: Presets["nvme"], PageSize: in.PageSize, Env: in.Env()}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			var n uint64
			for n < uint64(b.N) {
				src, err := in.Source()
				if err != nil {
					b.Fatal(err)
				}
				r, err := Run(cfg, src)
				src.Close()
				if err != nil {
					b.Fatal(err)
				}
				n += r.Events
			}
			reportRates(b, n, cpuTime()-cpu0)
		})
	}
}
