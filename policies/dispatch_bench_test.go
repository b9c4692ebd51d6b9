package policies

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

// Dispatch benchmarks: run on one core with
//
//	go test -run '^$' -bench 'Dispatch' -benchmem -cpu 1 ./policies
//
// BenchmarkDispatch is the figure compared with PredictIO's runtime
// dispatch (15.5-21.1 M events/s without requests, 6.3-8.8 M with
// requests): every policy does the work a real stream gives it. Mevents/s
// counts wall time, Mevents/cpu-s the process's CPU time (the single-core
// rate on a shared machine).

// runDispatch dispatches evs in a loop of b.N events; when fresh is set, it
// builds a new dispatcher with fresh() at the start of each pass over evs,
// inside the timed loop, as a new run of the workload would start with
// empty policy state.
func runDispatch(b *testing.B, d *Dispatcher, evs []Event, fresh func() *Dispatcher) {
	var reqs, pages uint64
	emit := func(r *Request) {
		reqs++
		for _, rg := range r.Ranges {
			pages += uint64(rg.N)
		}
	}
	if fresh == nil {
		// Warm up: fill policy state so that the measured loop is steady.
		for i := range evs {
			d.Dispatch(&evs[i], emit)
		}
	}
	reqs, pages = 0, 0
	b.ReportAllocs()
	cpu := startCPU(b)
	n := len(evs)
	for i := 0; i < b.N; i++ {
		j := i % n
		if j == 0 && fresh != nil {
			d = fresh()
		}
		d.Dispatch(&evs[j], emit)
	}
	cpu.stop()
	b.ReportMetric(float64(reqs)/float64(b.N), "req/event")
	b.ReportMetric(float64(pages)/float64(b.N), "pages/event")
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

// BenchmarkDispatch routes a stream in which every policy does real work
// through readahead, stride, markov, tree and tensor (see workStream): a
// trained markov model walked on every read, reads of pages not cached,
// tree hints whose children were not requested within the TTL, tensor
// extents not seen before. Each pass over the stream starts a new
// dispatcher (a new run), its cost included.
func BenchmarkDispatch(b *testing.B) {
	ws := newWorkStream(b)
	runDispatch(b, ws.dispatcher(b), ws.evs, func() *Dispatcher { return ws.dispatcher(b) })
}

// BenchmarkDispatchFastExits is the cost of routing alone: a stream in
// which every policy runs and none emits (cached pages, an untrained
// markov model, tree hints within their TTL, repeated tensor extents). It
// is a lower bound on dispatch cost, not a workload figure.
func BenchmarkDispatchFastExits(b *testing.B) {
	d, evs := fastExitSetup(b)
	runDispatch(b, d, evs, nil)
	if r := d.Events; r == 0 {
		b.Fatal("nothing dispatched")
	}
}

// BenchmarkDispatchPolicy runs the work stream through one policy at a
// time, to show where the time goes.
func BenchmarkDispatchPolicy(b *testing.B) {
	ws := newWorkStream(b)
	for _, spec := range ws.specs {
		b.Run(strings.SplitN(spec, ":", 2)[0], func(b *testing.B) {
			build := func() *Dispatcher { return buildAll(b, ws.env, spec) }
			runDispatch(b, build(), ws.evs, build)
		})
	}
}

func buildAll(tb testing.TB, env Env, specs ...string) *Dispatcher {
	ps, err := BuildAll(specs, env)
	if err != nil {
		tb.Fatal(err)
	}
	return NewDispatcher(ps...)
}

// The work stream: one pass is workEvents events, in groups of 16:
//
//	11 demand reads of the 4 trained files, each following its trained
//	   page sequence (a random order of workSeqPages pages), so the markov
//	   walk predicts real pages, and readahead sees random misses;
//	 2 reads of a fifth file with a constant stride of 64 pages;
//	 2 tree hints of 16 random children of a 1 Mi-page file (window 8),
//	   event times 1 us apart and a TTL of 1 ms: children repeat rarely;
//	 1 tensor layout of a new 1 MiB extent.
const (
	workEvents    = 1 << 16
	workFiles     = 4
	workFilePages = 1 << 16
	workSeqPages  = 1 << 14 // > reads per file per pass: no state repeats
	workStride    = 64
)

type workStream struct {
	env   Env
	specs []string
	evs   []Event
}

func (ws *workStream) dispatcher(tb testing.TB) *Dispatcher {
	return buildAll(tb, ws.env, ws.specs...)
}

// trainedPath names trained file i (file ids 1..workFiles).
func trainedPath(i uint32) string { return "/bench/trained-" + strconv.Itoa(int(i)) }

func newWorkStream(tb testing.TB) *workStream {
	rng := rand.New(rand.NewPCG(1, 2))
	// Train one model per file on three runs: the sequence twice, and
	// once with 10% of its pages replaced, so that about one state in five
	// has a second, less likely transition.
	mb := NewMarkovBuilder(0)
	seqs := make([][]uint64, workFiles+1)
	for f := uint32(1); f <= workFiles; f++ {
		perm := rng.Perm(workFilePages)[:workSeqPages]
		seq := make([]uint64, len(perm))
		for i, p := range perm {
			seq[i] = uint64(p)
		}
		seqs[f] = seq
		key := FileKey{Path: trainedPath(f), Size: workFilePages * DefaultPageSize, MtimeNS: 1}
		mb.AddRun(0, key, seq)
		mb.AddRun(1, key, seq)
		alt := slices.Clone(seq)
		for i := range alt {
			if rng.IntN(10) == 0 {
				alt[i] = uint64(rng.IntN(workFilePages))
			}
		}
		mb.AddRun(2, key, alt)
	}
	const strideFile, treeFile, tensorFile = workFiles + 1, workFiles + 2, workFiles + 3
	ws := &workStream{
		specs: []string{"readahead", "stride", "markov", "tree:window=8,ttl=1ms", "tensor"},
		env: Env{
			FilePages: func(f uint32) uint64 {
				if f <= workFiles {
					return workFilePages
				}
				return 1 << 20
			},
			FileKey: func(f uint32) (FileKey, bool) {
				if f < 1 || f > workFiles {
					return FileKey{}, false
				}
				return FileKey{Path: trainedPath(f), Size: workFilePages * DefaultPageSize, MtimeNS: 1}, true
			},
			Markov: mb.Build(),
		},
		evs: make([]Event, workEvents),
	}
	var pos [workFiles + 1]int
	var strided, tensors uint64
	for i := range ws.evs {
		e := &ws.evs[i]
		e.TS = uint64(i) * 1000
		switch g := i % 16; {
		case g < 11:
			f := uint32(1 + (i/16*11+g)%workFiles)
			e.File = f
			e.Kind, e.Access = EventFileAccess, FileAccess{Kind: formats.KindRead, Page: seqs[f][pos[f]], NPages: 1}
			pos[f]++
		case g < 13:
			e.File = strideFile
			e.Kind, e.Access = EventFileAccess, FileAccess{Kind: formats.KindRead, Page: strided * workStride, NPages: 1}
			strided++
		case g < 15:
			children := make([]uint64, 16)
			for c := range children {
				children[c] = uint64(rng.IntN(1 << 20))
			}
			e.File = treeFile
			e.Kind, e.Tree = EventTreeChildEnter, TreeChildEnter{ParentPage: uint64(rng.IntN(1 << 20)), Children: children}
		default:
			e.File = tensorFile
			e.Kind, e.Tensor = EventTensorLayout, TensorLayout{Name: "w", Offset: tensors << 20, Length: 1 << 20}
			tensors++
		}
	}
	return ws
}

// fastExitSetup is the stream of BenchmarkDispatchFastExits.
func fastExitSetup(tb testing.TB) (*Dispatcher, []Event) {
	env := Env{
		FilePages: func(uint32) uint64 { return 1 << 20 },
		FileKey:   func(uint32) (FileKey, bool) { return FileKey{Path: "/untrained"}, true },
		Markov:    NewMarkovBuilder(0).Build(),
	}
	d := buildAll(tb, env, "readahead", "stride", "markov", "tree:ttl=1000h", "tensor")
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

// TestDispatchNoAllocs enforces what the benchmarks report. The fast-exit
// stream allocates nothing per event. In the work stream every policy
// emits and per-file state grows (page sets in 4096-page chunks, the
// tensor extent set by doubling), so one pass over it may allocate, but
// less than once per 128 events; none of it is per event.
func TestDispatchNoAllocs(t *testing.T) {
	d, evs := fastExitSetup(t)
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
	if allocs != 0 || reqs != 0 {
		t.Errorf("fast exits: %.2f allocations per event, %d requests", allocs, reqs)
	}

	ws := newWorkStream(t)
	d = ws.dispatcher(t)
	reqs = 0
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range ws.evs {
		d.Dispatch(&ws.evs[i], emit)
	}
	runtime.ReadMemStats(&after)
	if n := after.Mallocs - before.Mallocs; n > uint64(len(ws.evs)/128) {
		t.Errorf("work stream: %d allocations in %d events", n, len(ws.evs))
	}
	if reqs < len(ws.evs)/2 {
		t.Errorf("work stream: %d requests in %d events; the policies take their fast exits", reqs, len(ws.evs))
	}
}

// TestWorkStreamDoesWork checks that each policy of BenchmarkDispatch
// emits on its own events: the benchmark measures work, not fast exits.
func TestWorkStreamDoesWork(t *testing.T) {
	ws := newWorkStream(t)
	const groups = workEvents / 16
	for i, want := range []int{
		groups * 13 * 9 / 10, // readahead: 9 in 10 reads miss and read
		groups * 2 * 9 / 10,  // stride: 9 in 10 strided reads predict
		groups * 11 * 3 / 4,  // markov: 3 in 4 trained reads emit
		groups * 2,           // tree: every hint
		groups,               // tensor: every extent
	} {
		d := buildAll(t, ws.env, ws.specs[i])
		reqs := 0
		for j := range ws.evs {
			d.Dispatch(&ws.evs[j], func(*Request) { reqs++ })
		}
		if reqs < want {
			t.Errorf("%s: %d requests in %d events, want at least %d", ws.specs[i], reqs, len(ws.evs), want)
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
