package policies

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

// Dispatch benchmarks: run on one core with
//
//	go test -run '^$' -bench Dispatch -benchmem -cpu 1 ./policies
//
// events/s is the figure compared with PredictIO's runtime dispatch
// (15.5-21.1 M events/s without requests, 6.3-8.8 M with requests).

func benchEnv() Env {
	return Env{
		FilePages: func(uint32) uint64 { return 1 << 20 },
		FileKey:   func(uint32) (FileKey, bool) { return FileKey{Path: "/untrained"}, true },
		Markov:    NewMarkovBuilder(0).Build(),
	}
}

func runDispatch(b *testing.B, d *Dispatcher, evs []Event) {
	var reqs, pages uint64
	emit := func(r *Request) {
		reqs++
		pages += uint64(len(r.Ranges))
	}
	// Warm up: fill policy state so that the measured loop is steady.
	for i := range evs {
		d.Dispatch(&evs[i], emit)
	}
	reqs, pages = 0, 0
	b.ReportAllocs()
	cpu := startCPU(b)
	n := len(evs)
	for i := 0; i < b.N; i++ {
		d.Dispatch(&evs[i%n], emit)
	}
	cpu.stop()
	b.ReportMetric(float64(reqs)/float64(b.N), "req/event")
}

// cpuClock reports events per wall-clock second and per CPU second of the
// process (getrusage): on a shared, loaded machine the second is the
// single-core throughput, the first also counts time spent runnable but
// not running.
type cpuClock struct {
	b     *testing.B
	start time.Duration
}

// processCPU is the time the process's threads have run, from the
// scheduler's per-thread sum_exec_runtime (/proc/self/task/*/schedstat,
// nanoseconds), or from getrusage where that is unavailable.
func processCPU() time.Duration {
	tasks, _ := filepath.Glob("/proc/self/task/*/schedstat")
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(ns)
		}
	}
	if sum > 0 {
		return sum
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU(b *testing.B) *cpuClock {
	c := &cpuClock{b: b, start: processCPU()}
	b.ResetTimer()
	return c
}

func (c *cpuClock) stop() {
	c.b.StopTimer()
	cpu := processCPU() - c.start
	c.b.ReportMetric(float64(c.b.N)/c.b.Elapsed().Seconds()/1e6, "Mevents/s")
	if cpu > 0 {
		c.b.ReportMetric(float64(c.b.N)/cpu.Seconds()/1e6, "Mevents/cpu-s")
	}
}

// BenchmarkDispatchNoRequests routes a mixed stream (page accesses to
// cached pages, repeated tree hints within their TTL, repeated tensor
// extents, layer starts) through readahead, stride, markov, tree and
// tensor: every policy runs, none emits.
func BenchmarkDispatchNoRequests(b *testing.B) {
	d, evs := noRequestsSetup(b)
	runDispatch(b, d, evs)
	if r := d.Events; r == 0 {
		b.Fatal("nothing dispatched")
	}
}

func buildAll(tb testing.TB, specs ...string) *Dispatcher {
	ps, err := BuildAll(specs, benchEnv())
	if err != nil {
		tb.Fatal(err)
	}
	return NewDispatcher(ps...)
}

func noRequestsSetup(tb testing.TB) (*Dispatcher, []Event) {
	d := buildAll(tb, "readahead", "stride", "markov", "tree:ttl=1000h", "tensor")
	evs := make([]Event, 4096)
	children := []uint64{11, 12, 13, 14}
	var next [5]uint64
	for i := range evs {
		e := &evs[i]
		e.TS = uint64(i)
		e.File = uint32(1 + i%4)
		switch i % 8 {
		case 5:
			e.Kind, e.Tree = EventTreeChildEnter, TreeChildEnter{Children: children}
		case 6:
			e.Kind, e.Tensor = EventTensorLayout, TensorLayout{Name: "w", Offset: 0, Length: 1 << 20}
		case 7:
			e.Kind, e.Layer = EventLayerStart, LayerStart{Index: 1}
		default:
			// Sequential 1-page reads per file: after warm-up every page
			// is cached and no readahead mark is left on the path.
			e.Kind, e.Access = EventFileAccess, FileAccess{Kind: formats.KindRead, Page: next[e.File] % 512, NPages: 1}
			next[e.File]++
		}
	}
	return d, evs
}

// BenchmarkDispatchRequests routes tree hints (ttl 0: every hint emits a
// request of 8 children) and strided page accesses (the stride policy
// emits the next stride on each access) through tree, stride and tensor.
func BenchmarkDispatchRequests(b *testing.B) {
	d, evs := requestsSetup(b)
	runDispatch(b, d, evs)
}

func requestsSetup(tb testing.TB) (*Dispatcher, []Event) {
	d := buildAll(tb, "tree:ttl=0s,window=8", "stride:confidence=1,lookahead=1", "tensor")
	evs := make([]Event, 4096)
	children := []uint64{900, 40, 41, 42, 7, 300, 301, 12, 5000}
	for i := range evs {
		e := &evs[i]
		e.TS = uint64(i)
		e.File = 1
		if i%2 == 0 {
			e.Kind, e.Tree = EventTreeChildEnter, TreeChildEnter{Children: children}
		} else {
			e.File = 2
			e.Kind, e.Access = EventFileAccess, FileAccess{Kind: formats.KindRead, Page: uint64(i/2) * 16 % (1 << 19), NPages: 1}
		}
	}
	return d, evs
}

// TestDispatchNoAllocs enforces what the benchmarks report: steady-state
// dispatch allocates nothing, with or without requests.
func TestDispatchNoAllocs(t *testing.T) {
	for name, setup := range map[string]func(testing.TB) (*Dispatcher, []Event){"no-requests": noRequestsSetup, "requests": requestsSetup} {
		d, evs := setup(t)
		reqs := 0
		emit := func(*Request) { reqs++ }
		for i := range evs {
			d.Dispatch(&evs[i], emit)
		}
		reqs = 0
		i := 0
		allocs := testing.AllocsPerRun(len(evs), func() {
			d.Dispatch(&evs[i%len(evs)], emit)
			i++
		})
		if allocs != 0 {
			t.Errorf("%s: %.2f allocations per event", name, allocs)
		}
		if (name == "requests") != (reqs > 0) {
			t.Errorf("%s: %d requests emitted", name, reqs)
		}
	}
}

// BenchmarkReadaheadSequential drives the readahead model alone with
// sequential 1-page reads of a 4 GiB file (its own residency, i.e. an
// unbounded cache): mostly cached pages, a window every few hundred reads.
func BenchmarkReadaheadSequential(b *testing.B) {
	for _, resident := range []bool{false, true} {
		name := "own-residency"
		if resident {
			name = "resident-callback"
		}
		b.Run(name, func(b *testing.B) {
			cache := make([]bool, 1<<20) // a stand-in for a simulator's cache
			cfg := ReadaheadConfig{FilePages: func(uint32) uint64 { return 1 << 20 }}
			emit := func(*Request) {}
			if resident {
				cfg.Resident = func(_ uint32, p uint64) bool { return cache[p] }
				emit = func(r *Request) {
					for _, rg := range r.Ranges {
						for i := range uint64(rg.N) {
							cache[rg.First+i] = true
						}
					}
				}
			}
			m := NewReadahead(cfg)
			ev := Event{Kind: EventFileAccess, File: 1, Access: FileAccess{Kind: formats.KindRead, NPages: 1}}
			b.ReportAllocs()
			cpu := startCPU(b)
			for i := 0; i < b.N; i++ {
				ev.Access.Page = uint64(i) % (1 << 20)
				if ev.Access.Page == 0 {
					m.Reset()
					clear(cache)
				}
				m.Handle(&ev, emit)
			}
			cpu.stop()
		})
	}
}

// BenchmarkReadaheadRandom drives the readahead model with uniform random
// 1-page reads over 1 Mi pages, residency from a bitmap cache of 64 Ki
// pages (random eviction): mostly misses, the simulator's worst case.
func BenchmarkReadaheadRandom(b *testing.B) {
	const span, capacity = 1 << 20, 1 << 16
	cache := make([]bool, span)
	var ring [capacity]uint64
	var n, head int
	insert := func(p uint64) {
		if cache[p] {
			return
		}
		if n == capacity {
			cache[ring[head]] = false
			n--
		}
		cache[p] = true
		ring[head] = p
		head = (head + 1) % capacity
		n++
	}
	m := NewReadahead(ReadaheadConfig{
		FilePages: func(uint32) uint64 { return span },
		Resident:  func(_ uint32, p uint64) bool { return cache[p] },
	})
	emit := func(r *Request) {
		for _, rg := range r.Ranges {
			for i := range uint64(rg.N) {
				insert(rg.First + i)
			}
		}
	}
	rng := uint64(88172645463325252)
	ev := Event{Kind: EventFileAccess, File: 1, Access: FileAccess{Kind: formats.KindRead, NPages: 1}}
	b.ReportAllocs()
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		ev.Access.Page = rng % span
		m.Handle(&ev, emit)
		insert(ev.Access.Page)
	}
	cpu.stop()
}
