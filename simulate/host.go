package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// Host is the CPU side of the model, from a device profile's host costs
// (formats.HostCosts, measured by 'bench device'): what a read served from
// the page cache costs its thread, and what the kernel backend's one
// service goroutine spends issuing each prefetch request. Without it
// (presets, older profiles) cached reads cost nothing and a policy's
// requests reach the device the moment they are made.
type Host struct {
	// HitNS is a one-page read served from the cache; HitPageNS what each
	// further page adds.
	HitNS     int64 `json:"hit_ns"`
	HitPageNS int64 `json:"hit_page_ns"`
	// MissNS is what a demand read of an uncached page costs beyond the
	// device's latency (the page cache's part of it).
	MissNS int64 `json:"miss_ns"`
	// OpenNS is opening a file whose path lookup is cached, for the
	// backend or the program.
	OpenNS int64 `json:"open_ns"`
	// Issue is the backend's time per request by range length, ascending
	// (linear between the points, and past the last by its last slope).
	Issue []IssueCost `json:"issue"`
	// IssueCachedNS is a request whose pages are all cached.
	IssueCachedNS int64 `json:"issue_cached_ns"`
	// WakeNS delays a request that finds the backend idle (its goroutine
	// and CPU wake first); SubmitWakeNS is what submitting it costs the
	// program's thread.
	WakeNS       int64 `json:"wake_ns"`
	SubmitWakeNS int64 `json:"submit_wake_ns"`
	// AdviseDelayNS is how much later than its issue a request's pages
	// reach the device: the kernel's io-wq runs the FADVISE after the
	// backend submits it (the profile's advise latency less the part of
	// a one-page request's cost the backend spends before it, which
	// Issue holds).
	AdviseDelayNS int64 `json:"advise_delay_ns,omitempty"`
	// IssueBusy is how much longer a request takes while one thread of
	// the program is on a CPU (in think time or copying cached pages);
	// each further busy thread adds as much again. Slowdown is how much
	// longer that thread's work takes while the backend issues. Both are
	// applied in proportion to how busy the other side has been lately
	// (load).
	IssueBusy float64 `json:"issue_busy"`
	Slowdown  float64 `json:"slowdown"`
}

// IssueCost is the backend's time per request of Pages pages.
type IssueCost struct {
	Pages uint64 `json:"pages"`
	NS    int64  `json:"ns"`
}

// HostFromProfile builds the host model from a profile's host costs, or
// returns nil when the profile has none.
func HostFromProfile(h *formats.HostCosts) (*Host, error) {
	if h == nil {
		return nil, nil
	}
	switch {
	case h.CPUs < 1 || h.CPUs > 1<<16:
		return nil, fmt.Errorf("field host.cpus is %d, want 1..65536", h.CPUs)
	case h.CachedReadNS > 1e9 || h.CachedReadPageNS > 1e9 || h.PrefetchCachedNS > 1e9 || h.ColdReadNS > 1e10 || h.ColdReadDirectNS > 1e10 || h.OpenNS > 1e9:
		return nil, errors.New("field host.cached_read_ns, cached_read_page_ns, prefetch_cached_ns, cold_read_ns, cold_read_direct_ns or open_ns is out of range")
	case !(h.BusySlowdown >= 1) || h.BusySlowdown > 100:
		return nil, fmt.Errorf("field host.busy_slowdown is %v, want 1..100", h.BusySlowdown)
	case h.ColdReadBytesPerSec != 0 && !(h.ColdReadBytesPerSec >= 1e6 && h.ColdReadBytesPerSec <= 1e12):
		return nil, fmt.Errorf("field host.cold_read_bytes_per_sec is %v, want 0 (not measured) or 1e6..1e12", h.ColdReadBytesPerSec)
	case h.PrefetchWakeNS > 1e9 || h.SubmitWakeNS > 1e9 || h.AdviseNS > 1e9:
		return nil, errors.New("field host.prefetch_wake_ns, submit_wake_ns or advise_ns is over 1 s")
	case h.PrefetchBusyNS == 0 || h.PrefetchBusyNS > 1e9:
		return nil, fmt.Errorf("field host.prefetch_busy_ns is %d, want 1 ns..1 s", h.PrefetchBusyNS)
	case len(h.Prefetch) == 0 || len(h.Prefetch) > 64:
		return nil, fmt.Errorf("field host.prefetch has %d points, want 1..64", len(h.Prefetch))
	}
	m := &Host{HitNS: int64(h.CachedReadNS), HitPageNS: int64(h.CachedReadPageNS),
		MissNS: max(int64(h.ColdReadNS)-int64(h.ColdReadDirectNS), 0), OpenNS: int64(h.OpenNS),
		IssueCachedNS: int64(h.PrefetchCachedNS), Slowdown: h.BusySlowdown,
		WakeNS: int64(h.PrefetchWakeNS), SubmitWakeNS: int64(h.SubmitWakeNS)}
	for i, p := range h.Prefetch {
		if p.Pages == 0 || p.NS == 0 || p.NS > 1e9 || i > 0 && uint64(p.Pages) <= m.Issue[i-1].Pages {
			return nil, fmt.Errorf("field host.prefetch[%d] is %d pages in %d ns, want ascending pages and 1 ns..1 s", i, p.Pages, p.NS)
		}
		m.Issue = append(m.Issue, IssueCost{Pages: uint64(p.Pages), NS: int64(p.NS)})
	}
	if m.Issue[0].Pages != 1 {
		return nil, fmt.Errorf("field host.prefetch starts at %d pages, want 1", m.Issue[0].Pages)
	}
	m.IssueBusy = max(float64(h.PrefetchBusyNS)/float64(m.Issue[0].NS), 1)
	if m.IssueBusy > 100 {
		return nil, fmt.Errorf("field host.prefetch_busy_ns is %d, %.0f times prefetch[0].ns; want at most 100 times", h.PrefetchBusyNS, m.IssueBusy)
	}
	m.AdviseDelayNS = max(int64(h.AdviseNS)-m.Issue[0].NS, 0)
	return m, nil
}

// issueNS is the backend's time for one range of n uncached pages.
func (h *Host) issueNS(n uint64) int64 {
	pts := h.Issue
	if n <= pts[0].Pages || len(pts) == 1 {
		if len(pts) == 1 {
			return pts[0].NS * int64(max(n, 1)) / int64(pts[0].Pages)
		}
		return pts[0].NS
	}
	i := 1
	for i < len(pts)-1 && n > pts[i].Pages {
		i++
	}
	a, b := pts[i-1], pts[i]
	slope := float64(b.NS-a.NS) / float64(b.Pages-a.Pages)
	// Never less than one page costs (measurements can dip).
	return max(a.NS+int64(math.Round(slope*float64(n-a.Pages))), pts[0].NS)
}

// hitNS is a demand access of n pages served from the cache.
func (h *Host) hitNS(n uint64) int64 { return h.HitNS + int64(n-1)*h.HitPageNS }

// Bounds of the kernel backend's queue (backend.Options' defaults; the
// page bound is Config.InFlight): requests past them are dropped.
const (
	issueQueueRanges = 4096
	issueQueuePages  = 8192
)

// issueItem is one queued range of a policy request.
type issueItem struct {
	file     uint32
	first, n uint64
	at       int64 // when the backend can start on it: requested, and awake
	req      int64 // when it was requested
}

// issuer is a lane's model of the kernel backend: one service goroutine
// that takes queued ranges in order and issues each, skipping the pages
// cached by then; a range's pages enter the cache when it is issued.
type issuer struct {
	host     *Host
	maxPages uint64 // the queue's page bound
	q        []issueItem
	head     int
	free     int64           // when the item being issued completes
	pages    uint64          // pages queued
	ranges   int             // ranges queued
	opened   map[uint32]bool // files the backend has opened
	woken    bool            // a request of the access being served woke it
	adv      advised         // issued ranges the kernel has not run yet
	rng      *rand.Rand      // adviseDelay's draws, seeded: runs repeat
}

// idle reports whether the backend has nothing to do at t.
func (s *issuer) idle(t int64) bool { return s.free <= t && s.head == len(s.q) }

// queue adds the pages [first, first+n) of file requested at t, or
// reports false when the backend's bounds drop them. A request that finds
// the backend idle waits for it to wake.
func (s *issuer) queue(file uint32, first, n uint64, at int64) bool {
	if s.ranges+1 > issueQueueRanges || s.pages+n > s.maxPages {
		return false
	}
	req := at
	if s.idle(at) {
		at += s.host.WakeNS
		s.woken = true
	}
	s.q = append(s.q, issueItem{file: file, first: first, n: n, at: at, req: req})
	s.pages += n
	s.ranges++
	return true
}

// finish issues what the backend still holds queued when the program
// ends (Run; a simulation fed with Step leaves it queued).
func (l *lane) finish() {
	l.finishMeta()
	if l.iss != nil {
		l.advance(math.MaxInt64)
	}
}

// advance issues, in order, every queued range whose issue starts by t.
func (l *lane) advance(t int64) {
	s := l.iss
	for s.head < len(s.q) {
		it := s.q[s.head]
		start := max(it.at, s.free)
		if start > t {
			break
		}
		s.head++
		s.pages -= it.n
		s.ranges--
		l.land(start)
		s.free = l.issue(it, start)
	}
	l.land(t)
	if s.head == len(s.q) {
		s.q, s.head = s.q[:0], 0
	} else if s.head > 1024 && s.head > len(s.q)/2 {
		s.q, s.head = s.q[:copy(s.q, s.q[s.head:])], 0
	}
}

// issue issues one queued range at start, as the kernel backend does: the
// file opened first if the backend has not yet, then the uncached pages in
// contiguous runs, each a request to the device once the backend has
// spent its time on it (longer as far as the program's threads have been
// on the CPUs lately, progLoad); it returns when the backend is done.
func (l *lane) issue(it issueItem, start int64) int64 {
	h := l.iss.host
	f := 1 + l.progLoad.at(start)*(h.IssueBusy-1)
	cost := func(ns int64) int64 { return int64(float64(ns) * f) }
	at := start
	if !l.iss.opened[it.file] {
		l.iss.opened[it.file] = true
		c := l.openCost(it.file, start, f)
		at += c
		l.st.BackendOpenNS += c
	}
	issued := false
	l.absentRuns(it.file, it.first, it.first+it.n, func(start, n uint64) {
		at += cost(h.issueNS(n))
		l.prefetchRun(it.file, start, n, at, it.req)
		issued = true
	})
	if !issued {
		at += cost(h.IssueCachedNS)
	}
	l.issLoad.add(start, at)
	l.st.BackendBusyNS += at - start
	return at
}

// pending is a range the backend has issued whose FADVISE the kernel has
// not run yet: at is when an io-wq worker runs it.
type pending struct {
	file     uint32
	first, n uint64
	at       int64
}

// advised is the issued ranges waiting for the kernel, a min-heap by at:
// each waits its own delay, so they land out of issue order, as io-wq's
// workers run them.
type advised []pending

func (h *advised) push(p pending) {
	*h = append(*h, p)
	a := *h
	for i := len(a) - 1; i > 0; {
		j := (i - 1) / 2
		if a[j].at <= a[i].at {
			break
		}
		a[i], a[j] = a[j], a[i]
		i = j
	}
}

func (h *advised) pop() pending {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	*h = a[:n]
	a = a[:n]
	for i := 0; ; {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && a[k].at < a[j].at {
			j = k
		}
		if a[i].at <= a[j].at {
			break
		}
		a[i], a[j] = a[j], a[i]
		i = j
	}
	return top
}

// prefetchRun hands pages [first, first+n) of file, requested at req and
// issued at at, to the kernel: its io-wq runs the FADVISE after a delay
// (adviseDelay), and only then do the pages enter the cache and their
// read reach the device. A demand that comes first reads its pages
// itself, and the FADVISE skips them, as force_page_cache_ra skips cached
// pages.
func (l *lane) prefetchRun(file uint32, first, n uint64, at, req int64) {
	l.st.Requests++
	l.st.Advised++
	p := pending{file: file, first: first, n: n, at: at + l.adviseDelay()}
	l.st.PipelineNS += p.at - req
	l.iss.adv.push(p)
}

// adviseDelay draws how long after its submission the kernel runs a
// FADVISE: exponentially distributed with mean AdviseDelayNS (an io-wq
// worker wakes and waits for a CPU; the delays replay measures spread
// about as an exponential's do).
func (l *lane) adviseDelay() int64 {
	m := l.iss.host.AdviseDelayNS
	if m <= 0 {
		return 0
	}
	d := int64(l.iss.rng.ExpFloat64() * float64(m))
	l.st.AdviseDelayNS += d
	return d
}

// land runs the FADVISEs due by t: the absent pages of each are read from
// the device, in contiguous runs.
func (l *lane) land(t int64) {
	adv := &l.iss.adv
	for len(*adv) > 0 && (*adv)[0].at <= t {
		p := adv.pop()
		l.absentRuns(p.file, p.first, p.first+p.n, func(start, n uint64) {
			done := l.dev.submitFor(p.at, n, p.file)
			l.st.PagesRead += n
			l.st.Prefetched += n
			for q := start; q < start+n; q++ {
				l.cache.insert(p.file, q, done, flagPrefetched)
			}
		})
	}
}

// queue hands a policy request to the lane's backend model: each range,
// clipped at end of file eof (when known), is queued at l.now, or dropped
// at the backend's bounds.
func (l *lane) queue(req *policies.Request, eof uint64) {
	for _, r := range req.Ranges {
		first, last := clipRange(r, eof)
		if first >= last {
			continue
		}
		if !l.iss.queue(req.File, first, last-first, l.now) {
			l.st.PagesDropped += last - first
		}
	}
}

// contend returns how long d ns of CPU work of a thread takes from t:
// longer by the measured slowdown as far as the backend has been busy
// lately (issLoad).
func (l *lane) contend(d, t int64) int64 {
	l.advance(t)
	u := l.issLoad.at(t)
	if u == 0 || d <= 0 {
		return d
	}
	s := int64(float64(d) * (1 + min(u, 1)*(l.host.Slowdown-1)))
	l.st.ContentionNS += s - d
	return s
}

// cachedRead charges the copy of n cached pages from now, and returns when
// it is done.
func (l *lane) cachedRead(now int64, n uint64) int64 {
	d := l.host.hitNS(n)
	l.st.CachedReadNS += d
	if l.iss != nil {
		d = l.contend(d, now)
		l.progLoad.add(now, now+d)
	}
	return now + d
}

// hostNote says what the host model charged, or that there is none.
func (s *Simulator) hostNote() string {
	h := s.cfg.Device.Host
	if h == nil {
		if !s.cfg.Calibrated {
			return "" // a preset: a device alone, by design
		}
		return "the device profile has no host costs (measured before they were added; measure again with 'predictio bench device'): " +
			"reads served from the cache cost nothing, and a policy's requests reach the device the moment they are made"
	}
	return fmt.Sprintf("host costs from the profile: a cached 4 KiB read %.1f µs, an uncached one %.1f µs more than the device's latency; "+
		"the kernel backend issues a 1-page request in %.1f µs (x%.2f while a thread of the program is on a CPU, which runs x%.2f slower meanwhile), and opens a file in %.1f µs when its path is cached",
		float64(h.HitNS)/1e3, float64(h.MissNS)/1e3, float64(h.Issue[0].NS)/1e3, h.IssueBusy, h.Slowdown, float64(h.OpenNS)/1e3)
}

// paths is a lane's model of the path lookups a cold run starts without
// (replay drops dentries, inodes and the block device's cache): a file's
// lookup is warm once the program or the backend has opened or stat'ed
// it. A lookup that is warm costs Host.OpenNS at most; a cold one what the
// program's recorded cold opens cost, on average, so far. With
// Config.Dirs it also models each directory's blocks: cached once the
// program has read the directory or looked a name up in it, or the
// backend has opened a file in it. The backend's open of a file in a
// directory not yet cached waits for its blocks from the device (queued
// behind its own prefetches), and the program's read of a small
// directory the backend cached costs Host.OpenNS at most.
type paths struct {
	warm              map[uint32]int64 // when a file's lookup became warm
	coldSum, coldOpen int64            // recorded service of the program's cold opens
	dirs              *Dirs            // nil: directories not modelled
	dirWarm           []int64          // by directory: when its blocks are cached; math.MaxInt64 never
}

// initDirs starts the directory model of dirs, every directory cold.
func (p *paths) initDirs(dirs *Dirs) {
	if dirs == nil {
		return
	}
	p.dirs = dirs
	p.dirWarm = make([]int64, dirs.Len())
	for i := range p.dirWarm {
		p.dirWarm[i] = math.MaxInt64
	}
}

// dirCached marks directory i cached from t on (i < 0: unknown).
func (p *paths) dirCached(i int32, t int64) {
	if i >= 0 && t < p.dirWarm[i] {
		p.dirWarm[i] = t
	}
}

// lookup returns the service time of the program's metadata row of kind k
// on file at now, recorded svc: shorter when the backend made its lookup
// (or, for a readdir, its small directory) warm first.
func (l *lane) lookup(file uint32, k formats.AccessKind, now, svc int64) int64 {
	p := &l.paths
	switch k {
	case formats.KindReaddir:
		if p.dirs == nil {
			return svc
		}
		i := p.dirs.selfOf(file)
		if i >= 0 && p.dirWarm[i] <= now && p.dirs.small(i) {
			return min(svc, l.host.OpenNS)
		}
		p.dirCached(i, now+svc)
		return svc
	case formats.KindOpen, formats.KindStat:
	default:
		return svc
	}
	if w, ok := p.warm[file]; ok && w <= now {
		return min(svc, l.host.OpenNS)
	}
	if k == formats.KindOpen {
		p.coldSum += svc
		p.coldOpen++
	}
	p.warm[file] = now + svc
	if p.dirs != nil {
		p.dirCached(p.dirs.parentOf(file), now+svc)
	}
	return svc
}

// openCost is what the backend's open of file at t costs: a warm lookup's
// Host.OpenNS, or a cold one's estimate, after the blocks of its directory
// where they are not cached (Config.Dirs); the lookup is warm afterwards.
// f scales its CPU part as issue's scales a request's (the program's load).
func (l *lane) openCost(file uint32, t int64, f float64) int64 {
	p := &l.paths
	if w, ok := p.warm[file]; ok && w <= t {
		return int64(float64(l.host.OpenNS) * f)
	}
	at := t
	if p.dirs != nil {
		if i := p.dirs.parentOf(file); i >= 0 {
			switch w := p.dirWarm[i]; {
			case w == math.MaxInt64:
				for range p.dirs.lookupReads(i) {
					at = l.dev.submitSync(at, 1)
					l.st.BackendDirReads++
				}
			case w > at: // being read: wait for it
				at = w
			}
			p.dirCached(i, at)
		}
	}
	c := l.host.OpenNS
	if p.coldOpen > 0 {
		c = max(c, p.coldSum/p.coldOpen)
	}
	at += int64(float64(c) * f)
	p.warm[file] = at
	return at - t
}

// submitWake charges, from now, the submission that woke the backend
// during the access just served, and returns when it is done.
func (l *lane) submitWake(now int64) int64 {
	l.iss.woken = false
	d := l.host.SubmitWakeNS
	l.st.SubmitNS += d
	l.progLoad.add(now, now+d)
	return now + d
}

// loadTau is the time constant of a load's average.
const loadTau = 1e6 // ns

// load is how busy something has been lately: the exponentially decaying
// average, over loadTau, of how many of its parts were busy (the program's
// threads on a CPU, or the backend issuing), from its busy spans.
type load struct {
	v float64 // the average at t
	t int64
}

// at returns the average at t (never moving back in time).
func (x *load) at(t int64) float64 {
	if t > x.t {
		x.v *= math.Exp(-float64(t-x.t) / loadTau)
		x.t = t
	}
	return x.v
}

// add records a busy span [from, to): it adds 1 - exp(-(to-from)/loadTau)
// at to, decayed to the average's time if that is later.
func (x *load) add(from, to int64) {
	if to <= from {
		return
	}
	c := -math.Expm1(-float64(to-from) / loadTau)
	if to < x.t {
		c *= math.Exp(-float64(x.t-to) / loadTau)
	} else {
		x.at(to)
	}
	x.v += c
}
