package simulate

import (
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
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

// benchBundles are the whole-run benchmark's traces, written once under
// $PREDICTIO_SIMBENCH_DIR (default /var/tmp/predictio-simbench) and kept:
// $PREDICTIO_SIMBENCH_EVENTS requests (default 10 M) over 1 Mi pages of
// one file, uniform ("uniform": the bundle 'predictio trace synth -o DIR
// --pattern random --events N --file-pages 1048576' writes) or Zipf 0.9
// ("zipf": rank k has weight 1/k^0.9, ranks scattered over the file).
func benchBundle(b *testing.B, trace string) string {
	b.Helper()
	events := 10_000_000
	if v := os.Getenv("PREDICTIO_SIMBENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("PREDICTIO_SIMBENCH_EVENTS=%q: want a positive number", v)
		}
		events = n
	}
	root := os.Getenv("PREDICTIO_SIMBENCH_DIR")
	if root == "" {
		root = "/var/tmp/predictio-simbench"
	}
	dir := filepath.Join(root, fmt.Sprintf("%s-%d", trace, events))
	if _, err := os.Stat(filepath.Join(dir, formats.ManifestFile)); err == nil {
		return dir
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		b.Fatal(err)
	}
	const pages = 1 << 20
	switch trace {
	case "uniform":
		if err := formats.Synth(dir, formats.SynthSpec{Pattern: "random", Events: events, FilePages: pages}); err != nil {
			b.Fatal(err)
		}
	case "zipf":
		w, err := formats.Create(dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.AddFile(formats.File{ID: 1, Path: "/synth/zipf.dat", Size: pages * 4096}); err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewSource(9))
		a := formats.Access{PID: 1, TID: 1, Comm: "zipf", FileID: 1, NPages: 1, Kind: formats.KindRead}
		for i, p := range zipfPages(rng, events, pages, 0.9) {
			a.TS, a.FirstPage = 1e12+uint64(i)*2000, p
			if err := w.Append(&a); err != nil {
				b.Fatal(err)
			}
		}
		w.Manifest().Host.PageSize = 4096
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("wrote %s", dir)
	return dir
}

// BenchmarkWholeRun is simulate's whole run on a 10 M-request bundle, as
// 'predictio simulate' does it: open the bundle, read it, simulate, report
// (all but starting the process). lru is the LRU-only lane (--no-readahead
// --no-oracle), 64 Ki pages of cache; default adds the readahead baseline
// and the streamed oracle. One op is one whole run; Mreq/s counts
// requests. Run with -cpu 1,2 for one core and two.
func BenchmarkWholeRun(b *testing.B) {
	for _, trace := range []string{"uniform", "zipf"} {
		for _, lanes := range []string{"lru", "default"} {
			b.Run(trace+"/"+lanes, func(b *testing.B) {
				dir := benchBundle(b, trace)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cpuTime()
				var n uint64
				for range b.N {
					in, err := OpenInput(dir)
					if err != nil {
						b.Fatal(err)
					}
					cfg := Config{CacheBytes: 256 << 20, Device: Presets["nvme"], PageSize: in.PageSize, Env: in.Env(),
						NoReadahead: lanes == "lru", Oracle: lanes == "default"}
					src, err := in.Source()
					if err != nil {
						b.Fatal(err)
					}
					r, err := Run(cfg, src)
					if err != nil {
						b.Fatal(err)
					}
					if err := WriteTable(io.Discard, r); err != nil {
						b.Fatal(err)
					}
					src.Close()
					in.Close()
					n += r.Events
				}
				b.StopTimer()
				b.ReportMetric(float64(n)/b.Elapsed().Seconds()/1e6, "Mreq/s")
				b.ReportMetric(float64(n)/(cpuTime()-cpu0).Seconds()/1e6, "Mreq/cpu-s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
