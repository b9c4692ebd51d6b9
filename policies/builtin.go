package policies

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

func init() {
	register("readahead", &factory{
		example: "readahead:kb=512,kernel=6.1",
		doc:     "model of Linux on-demand readahead as 6.1, 6.12 or 6.18 run it (sync/async windows, PG_readahead marks, mmap read-around, exec mappings); the baseline of every comparison",
		params: []param{
			{"kb", "auto", "read_ahead_kb: the readahead maximum in KiB; auto: each file's device (Env.FileRA), else 128"},
			{"io_kb", "auto", "bdi io_pages in KiB (max_sectors_kb): reads larger than kb may use windows up to it; auto: each file's device, else kb; 0 means kb"},
			{"folios", "auto", "large: large folios (XFS; ext4 since Linux 6.16); small: order-0 pages only; auto: each file's filesystem, else ext4 on the modelled kernel"},
			{"kernel", "auto", "kernel release whose readahead code to follow (6.1, 6.12.117, ...): 6.1 code before 6.11, 6.12 code up to 6.15, 6.18 code from 6.16; auto: the bundle's kernel (Env.Kernel), else the running one"},
		},
		build: buildReadahead,
	})
	register("markov", &factory{
		example: "markov:depth=32,mode=random,seed=7",
		doc:     "history policy: per-file first-order Markov model trained from recorded runs (predictio train markov); on each access a bounded walk emits pages not seen yet",
		params: []param{
			{"depth", "16", "maximum walk length in transitions"},
			{"threshold", "0.1", "stop when the walked path's probability drops below this"},
			{"mode", "det", "det: follow the most likely transition; random: sample transitions"},
			{"seed", "1", "random seed for mode=random"},
		},
		build: func(a *args, env Env) (Policy, error) {
			if env.Markov == nil {
				return nil, errors.New("build policy \"markov\": no model loaded; train one with `predictio train markov -o MODEL BUNDLE...` and pass it with --model")
			}
			p := &markovPolicy{
				env:       env,
				depth:     int(a.uint("depth", 1, 1<<16)),
				threshold: a.float("threshold", 0, 1),
				random:    a.choice("mode", "det", "random") == "random",
			}
			seed := a.uint("seed", 0, math.MaxUint64)
			p.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			p.norm.MaxPages = env.maxPages()
			return p, nil
		},
	})
	register("tree", &factory{
		example: "tree:window=8,ttl=500ms",
		doc:     "B-tree hints: on TreeChildEnter, prefetch at most window upcoming children; pages requested within ttl (event time) are suppressed",
		params: []param{
			{"window", "16", "maximum children prefetched per hint"},
			{"ttl", "1s", "suppress pages requested this recently (event time)"},
			{"slots", "16384", "entries of the bounded recently-requested table (2-way set associative; an evicted entry only costs a redundant request)"},
		},
		build: func(a *args, env Env) (Policy, error) {
			p := &treePolicy{env: env, window: int(a.uint("window", 1, 1<<20)), ttl: uint64(a.duration("ttl"))}
			p.recent.init(int(a.uint("slots", 2, 1<<20)))
			p.norm.MaxPages = env.maxPages()
			return p, nil
		},
	})
	register("tensor", &factory{
		example: "tensor:chunk=512",
		doc:     "LLM tensor layout hints: on TensorLayout, prefetch the tensor's byte extent as page ranges in bounded chunks; repeated extents are ignored",
		params: []param{
			{"chunk", "0", "maximum pages per request; 0 means the command's --max-pages (default 256)"},
		},
		build: func(a *args, env Env) (Policy, error) {
			p := &tensorPolicy{env: env}
			p.norm.MaxPages = uint32(a.uint("chunk", 0, math.MaxUint32))
			if p.norm.MaxPages == 0 {
				p.norm.MaxPages = env.maxPages()
			}
			return p, nil
		},
	})
	register("stride", &factory{
		example: "stride:confidence=3,lookahead=8",
		doc:     "constant-stride detector: after confidence repeats of the same page stride in a file, prefetch lookahead strides ahead (strides no larger than the access are left to readahead)",
		params: []param{
			{"confidence", "2", "repeats of a stride before predicting"},
			{"lookahead", "4", "strides prefetched ahead of the current access"},
		},
		build: func(a *args, env Env) (Policy, error) {
			p := &stridePolicy{env: env, confidence: int(a.uint("confidence", 1, 1<<10)), lookahead: int64(a.uint("lookahead", 1, 1<<12))}
			p.norm.MaxPages = env.maxPages()
			return p, nil
		},
	})
	register("oracle", &factory{
		example: "oracle:n=256,scope=file",
		doc:     "upper bound: knows the bundle's future demand accesses and prefetches the next n distinct pages ahead of the current one, among the next horizon pages",
		params: []param{
			{"n", "64", "distinct pages kept prefetched ahead"},
			{"scope", "global", "global: next n pages of the whole trace; file: next n pages of the accessed file"},
			{"horizon", "0", "how many pages of the future to look through for them; 0 means max(65536, 16n)"},
		},
		build: func(a *args, env Env) (Policy, error) {
			if env.Future == nil {
				return nil, errors.New("build policy \"oracle\": no future given (Env.Future); the oracle needs the bundle being simulated")
			}
			n := int(a.uint("n", 1, 1<<24))
			h := int(a.uint("horizon", 0, 1<<30))
			if h == 0 {
				h = max(DefaultHorizon, 16*n)
			}
			if h < n {
				return nil, fmt.Errorf("build policy \"oracle\": horizon %d is less than n %d", h, n)
			}
			return newOracle(env, n, h, a.choice("scope", "global", "file") == "file"), nil
		},
	})
}

// markovPolicy walks a trained per-file Markov model.
type markovPolicy struct {
	env       Env
	depth     int
	threshold float64
	random    bool
	rng       *rand.Rand
	files     fileTable[markovFile]
	norm      Normalizer
}

type markovFile struct {
	model *FileModel
	seen  pageSet
	// walk is the file's last walk: its states, and in probs the
	// probability of each of its transitions (probs[j]: walk[j] ->
	// walk[j+1]). In det mode the next access usually lands on walk[1],
	// and the walk from there is this one less its first state, extended
	// (see reuse). skipped is set when a step of it passed over a
	// transition to a state already in the walk.
	walk    []uint64
	probs   []float64
	skipped bool
}

func (p *markovPolicy) Accepts(k EventKind) bool { return k == EventFileAccess }

func (p *markovPolicy) file(id uint32) *markovFile {
	f := p.files.get(id)
	if f != nil {
		return f
	}
	f = &markovFile{}
	p.files.put(id, f)
	if p.env.FileKey == nil {
		p.env.warn("markov: file %d: no file identities given, model not applied", id)
		return f
	}
	key, ok := p.env.FileKey(id)
	if !ok {
		return f
	}
	m, err := p.env.Markov.Lookup(key)
	if err != nil {
		p.env.warn("markov: %v; ignoring its model", err)
	}
	f.model = m
	return f
}

// Handle marks the accessed pages seen and walks the model from the
// access: at most depth transitions, the most likely one not already in the
// walk at each step (det) or a sampled one (random), until the walked
// path's probability drops below threshold. Pages of the walk not seen yet
// are emitted.
func (p *markovPolicy) Handle(ev *Event, emit Emit) {
	a := &ev.Access
	if !IsDemand(a.Kind) {
		return
	}
	f := p.file(ev.File)
	if f.model == nil {
		return
	}
	n := min(max(uint64(a.NPages), 1), maxAccessPages)
	for i := range n {
		f.seen.add(a.Page + i)
	}
	state := a.Page + n - 1
	if n > 1 && f.model.Next(state) == nil {
		state = a.Page
	}
	prob := 1.0
	if !p.random && p.reuse(f, state) {
		for _, q := range f.probs {
			if q != 1 { // x*1 == x exactly: skipping keeps the product bit for bit
				prob *= q
			}
		}
	} else {
		f.walk = append(f.walk[:0], state)
		f.probs = f.probs[:0]
		f.skipped = false
	}
	p.extend(f, prob)
	if p.norm.Pending() > 0 {
		p.norm.Flush(ev.File, p.env.eof(ev.File), emit)
	}
}

// reuse turns f's last walk into the walk from state when state is its
// second state and no step of it skipped a state in the walk: dropping the
// first state then changes no choice (only the dropped state could newly
// become a candidate, and no step passed over a transition to a walk
// state), the remaining steps' product of probabilities only grows, so none
// now falls below the threshold, and every state in it was marked seen by
// the last walk. extend then continues from its end exactly as a walk from
// state would. In the steady state of a trained sequence this replaces
// depth model lookups per access by one.
func (p *markovPolicy) reuse(f *markovFile, state uint64) bool {
	if len(f.walk) < 2 || f.walk[1] != state || f.skipped {
		return false
	}
	f.walk = f.walk[:copy(f.walk, f.walk[1:])]
	f.probs = f.probs[:copy(f.probs, f.probs[1:])]
	return true
}

// extend continues f's walk from its last state, whose path probability is
// prob, for the depth transitions the walk has left, and queues the pages
// it reaches that were not seen.
func (p *markovPolicy) extend(f *markovFile, prob float64) {
	state := f.walk[len(f.walk)-1]
	for d := len(f.probs); d < p.depth; d++ {
		var t *Transition
		s := f.model.states.slot(state)
		if s == nil {
			break
		}
		ts := f.model.states.trans[s.off : s.off+s.n]
		switch {
		case p.random:
			u := p.rng.Float64()
			cum := 0.0
			for i := range ts {
				cum += ts[i].P
				if u < cum || i == len(ts)-1 {
					t = &ts[i]
					break
				}
			}
			if t != nil && inWalk(f.walk, t.Next) {
				t = nil
			}
		case !inWalk(f.walk, s.first.Next):
			t = &s.first // ts[0], read from the slot: ts stays untouched
		default:
			for i := range ts {
				if !inWalk(f.walk, ts[i].Next) {
					t = &ts[i]
					break
				}
				f.skipped = true
			}
		}
		if t == nil {
			break
		}
		prob *= t.P
		if prob < p.threshold {
			break
		}
		state = t.Next
		f.walk = append(f.walk, state)
		f.probs = append(f.probs, t.P)
		if !f.seen.has(state) {
			f.seen.add(state)
			p.norm.Add(state)
		}
	}
}

func inWalk(walk []uint64, page uint64) bool {
	for _, w := range walk {
		if w == page {
			return true
		}
	}
	return false
}

// treePolicy prefetches upcoming B-tree children: the first window pages of
// a TreeChildEnter's Children (the parent's children after the entered one,
// in traversal order), less pages requested within ttl. Position is not
// used; children beyond end of file are clipped by the Normalizer.
type treePolicy struct {
	env    Env
	window int
	ttl    uint64
	recent ttlTable
	norm   Normalizer
}

func (p *treePolicy) Accepts(k EventKind) bool { return k == EventTreeChildEnter }

func (p *treePolicy) Handle(ev *Event, emit Emit) {
	children := ev.Tree.Children
	if len(children) > p.window {
		children = children[:p.window]
	}
	for _, c := range children {
		if p.ttl > 0 && p.recent.seen(ev.File, c, ev.TS, p.ttl) {
			continue
		}
		p.norm.Add(c)
	}
	if p.norm.Pending() > 0 {
		p.norm.Flush(ev.File, p.env.eof(ev.File), emit)
	}
}

// ttlTable remembers when pages were last requested, in a fixed-size
// 2-way set-associative table: memory is bounded and a lookup is a hash
// and two compares. A page whose entry was evicted is not suppressed.
type ttlTable struct {
	e    []ttlEntry
	mask uint64
}

type ttlEntry struct {
	page uint64
	ts   uint64
	file uint32
	used bool
}

func (t *ttlTable) init(slots int) {
	n := 2
	for n < slots {
		n <<= 1
	}
	t.e = make([]ttlEntry, n)
	t.mask = uint64(n - 1)
}

// seen reports whether (file, page) was recorded less than ttl before
// now; otherwise it records now and reports false.
func (t *ttlTable) seen(file uint32, page, now, ttl uint64) bool {
	h := (page ^ uint64(file)*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
	i := (h >> 32) & t.mask &^ 1
	a, b := &t.e[i], &t.e[i+1]
	var e *ttlEntry
	switch {
	case a.used && a.page == page && a.file == file:
		e = a
	case b.used && b.page == page && b.file == file:
		e = b
	default:
		e = a
		if !a.used || (b.used && b.ts < a.ts) {
			e = b
		}
		if !a.used {
			e = a
		}
		*e = ttlEntry{page: page, ts: now, file: file, used: true}
		return false
	}
	if now >= e.ts && now-e.ts < ttl {
		return true
	}
	e.ts = now
	return false
}

// tensorPolicy prefetches tensor extents.
type tensorPolicy struct {
	env  Env
	seen extentSet
	norm Normalizer
}

// maxUnboundedTensor caps the pages of one tensor when the end of its file
// is unknown: 1<<22 pages, 16 GiB with 4 KiB pages.
const maxUnboundedTensor = 1 << 22

// tensorKey identifies an extent. The name is not part of it: two names
// for the same bytes would prefetch the same pages.
type tensorKey struct {
	file           uint32
	offset, length uint64
}

func (p *tensorPolicy) Accepts(k EventKind) bool { return k == EventTensorLayout }

func (p *tensorPolicy) Handle(ev *Event, emit Emit) {
	t := &ev.Tensor
	if t.Length == 0 {
		return
	}
	if !p.seen.add(tensorKey{ev.File, t.Offset, t.Length}) {
		return
	}
	ps := p.env.pageSize()
	first := t.Offset / ps
	end := t.Offset + t.Length - 1
	if end < t.Offset { // overflow
		end = math.MaxUint64
	}
	last := end / ps
	eof := p.env.eof(ev.File)
	if eof > 0 && last >= eof {
		last = eof - 1
	}
	if eof == 0 && last-first >= maxUnboundedTensor {
		last = first + maxUnboundedTensor - 1 // bound a bogus length
	}
	for first <= last {
		n := min(last-first+1, math.MaxUint32)
		p.norm.AddRange(first, uint32(n))
		first += n
		if first == 0 {
			break
		}
	}
	p.norm.Flush(ev.File, eof, emit)
}

// extentSet is an exact open-addressing hash set of extents: a cheap
// multiplicative hash instead of the generic map hash of a padded struct.
type extentSet struct {
	slots []extentSlot
	n     int
}

type extentSlot struct {
	k    tensorKey
	used bool
}

func (k tensorKey) hash() uint64 {
	h := (k.offset*0x9e3779b97f4a7c15 ^ k.length) * 0xbf58476d1ce4e5b9
	return (h ^ uint64(k.file)*0x94d049bb133111eb) * 0x9e3779b97f4a7c15
}

// add inserts k and reports whether it was new.
func (s *extentSet) add(k tensorKey) bool {
	if 2*(s.n+1) > len(s.slots) {
		old := s.slots
		s.slots = make([]extentSlot, max(64, 2*len(old)))
		s.n = 0
		for _, e := range old {
			if e.used {
				s.add(e.k)
			}
		}
	}
	mask := uint64(len(s.slots) - 1)
	for i := k.hash() >> 32 & mask; ; i = (i + 1) & mask {
		e := &s.slots[i]
		if !e.used {
			*e = extentSlot{k, true}
			s.n++
			return true
		}
		if e.k == k {
			return false
		}
	}
}

// stridePolicy detects constant strides.
type stridePolicy struct {
	env        Env
	confidence int
	lookahead  int64
	files      fileTable[strideFile]
	norm       Normalizer
}

type strideFile struct {
	last   uint64
	stride int64
	hits   int
	ahead  uint64 // furthest access start already predicted
	valid  bool
}

func (p *stridePolicy) Accepts(k EventKind) bool { return k == EventFileAccess }

func (p *stridePolicy) Handle(ev *Event, emit Emit) {
	a := &ev.Access
	if !IsDemand(a.Kind) {
		return
	}
	f := p.files.get(ev.File)
	if f == nil {
		f = &strideFile{}
		p.files.put(ev.File, f)
	}
	n := max(int64(a.NPages), 1)
	d := int64(a.Page - f.last)
	// Predict at most a request's worth of pages per stride.
	pn := min(n, int64(p.norm.MaxPages))
	if !f.valid {
		f.valid, f.last = true, a.Page
		return
	}
	f.last = a.Page
	if d == f.stride && (d > n || d < -n) {
		f.hits++
	} else {
		f.stride, f.hits = d, 0
		return
	}
	if f.hits < p.confidence {
		return
	}
	eof := p.env.eof(ev.File)
	for k := int64(1); k <= p.lookahead; k++ {
		q := int64(a.Page) + k*d
		if q < 0 || (eof > 0 && uint64(q) >= eof) {
			break
		}
		if f.hits > p.confidence && ((d > 0 && uint64(q) <= f.ahead) || (d < 0 && uint64(q) >= f.ahead)) {
			continue // predicted by an earlier access
		}
		p.norm.AddRange(uint64(q), uint32(pn))
		f.ahead = uint64(q)
	}
	if p.norm.Pending() > 0 {
		p.norm.Flush(ev.File, eof, emit)
	}
}
