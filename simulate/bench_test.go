package simulate

import (
	"syscall"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// benchGen generates one-page reads on the fly into one reused event, as a
// bundle source does: "seq" scans 16 files of 64 Ki pages in turn (every
// page is new to a 64 Ki-page cache: one insert and one eviction per
// event); "random" reads uniformly random pages of the same files (a
// quarter hit); "hot" scans the first 1 Ki pages of each file in turn, a
// working set that fits the cache (all hits after warm-up).
type benchGen struct {
	pattern string
	i       uint64
	x       uint64 // xorshift state
	ev      policies.Event
}

func (g *benchGen) next() *policies.Event {
	const files, filePages = 16, 1 << 16
	var f uint32
	var p uint64
	switch g.pattern {
	case "hot":
		f = uint32(g.i/1024) % files
		p = g.i % 1024
	case "seq":
		f = uint32(g.i/filePages) % files
		p = g.i % filePages
	default:
		g.x ^= g.x << 13
		g.x ^= g.x >> 7
		g.x ^= g.x << 17
		f = uint32(g.x>>32) % files
		p = g.x % filePages
	}
	g.i++
	g.ev.Kind, g.ev.TS, g.ev.File = policies.EventFileAccess, g.i*2000, f
	g.ev.Access = policies.FileAccess{Kind: formats.KindRead, Page: p, NPages: 1}
	return &g.ev
}

// benchEvents returns the first n events of a pattern.
func benchEvents(pattern string, n int) []policies.Event {
	g := &benchGen{pattern: pattern, x: 88172645463325252}
	evs := make([]policies.Event, n)
	for i := range evs {
		evs[i] = *g.next()
	}
	return evs
}

func benchmarkSim(b *testing.B, pattern string, cfg Config) {
	cfg.Device = Presets["nvme"]
	cfg.CacheBytes = 256 << 20 // 64 Ki pages: a quarter of the data
	cfg.Env.FilePages = func(uint32) uint64 { return 1 << 16 }
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	g := &benchGen{pattern: pattern, x: 88172645463325252}
	// Warm the cache and the model with one pass over the data.
	for i := 0; i < 1<<20; i++ {
		s.Step(g.next())
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if err := s.Step(g.next()); err != nil {
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
