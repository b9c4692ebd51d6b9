package policies

func init() {
	register("physical", &factory{
		example: "physical:n=8",
		doc:     "physical neighbours: on each demand access, prefetch the n pages after it, whatever the file holds (the structure-blind comparison of the PredictIO paper's figure 11); pages the previous access's window already asked for are not asked again",
		params: []param{
			{"n", "8", "pages prefetched after the last page of the access"},
		},
		build: func(a *args, env Env) (Policy, error) {
			p := &physicalPolicy{env: env, n: a.uint("n", 1, 1<<20)}
			p.norm.MaxPages = env.maxPages()
			return p, nil
		},
	})
}

// physicalPolicy prefetches the n pages physically after each demand
// access. It keeps, per file, the window it last requested, so a
// sequential run asks for each page once.
type physicalPolicy struct {
	env   Env
	n     uint64
	files fileTable[physicalFile]
	norm  Normalizer
}

// physicalFile is the last window requested: pages [lo, hi).
type physicalFile struct{ lo, hi uint64 }

func (p *physicalPolicy) Accepts(k EventKind) bool { return k == EventFileAccess }

func (p *physicalPolicy) Handle(ev *Event, emit Emit) {
	a := &ev.Access
	if !IsDemand(a.Kind) {
		return
	}
	n := min(max(uint64(a.NPages), 1), maxAccessPages)
	first := a.Page + n
	last := first + p.n
	if first < a.Page || last < first {
		return // past the last page number
	}
	if eof := p.env.eof(ev.File); eof > 0 {
		last = min(last, eof)
	}
	if first >= last {
		return
	}
	f := p.files.get(ev.File)
	if f == nil {
		f = &physicalFile{}
		p.files.put(ev.File, f)
	}
	from := first
	if first >= f.lo && first < f.hi {
		from = f.hi // the previous window already asked for the start
	}
	f.lo, f.hi = first, last
	if from >= last {
		return
	}
	p.norm.AddRange(from, uint32(last-from))
	p.norm.Flush(ev.File, p.env.eof(ev.File), emit)
}
