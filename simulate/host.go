package simulate

import (
	"errors"
	"fmt"
	"math"

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
	at       int64 // when it was requested
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
	if s.idle(at) {
		at += s.host.WakeNS
		s.woken = true
	}
	s.q = append(s.q, issueItem{file: file, first: first, n: n, at: at})
	s.pages += n
	s.ranges++
	return true
}

// finish issues what the backend still holds queued when the program
// ends (Run; a simulation fed with Step leaves it queued).
func (l *lane) finish() {
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
		s.free = l.issue(it, start)
	}
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
		c := l.openCost(it.file, start)
		at += c
		l.st.BackendOpenNS += c
	}
	issued := false
	var runStart, runLen uint64
	flush := func() {
		if runLen > 0 {
			at += cost(h.issueNS(runLen))
			l.prefetchRun(it.file, runStart, runLen, at)
			runLen, issued = 0, true
		}
	}
	for p := it.first; p < it.first+it.n; p++ {
		if l.cache.lookup(it.file, p) >= 0 {
			flush()
			continue
		}
		if runLen == 0 {
			runStart = p
		}
		runLen++
	}
	flush()
	if !issued {
		at += cost(h.IssueCachedNS)
	}
	l.issLoad.add(start, at)
	l.st.BackendBusyNS += at - start
	return at
}

// prefetchRun reads pages [first, first+n) of file ahead from the device,
// the request issued at at; its pages are ready AdviseDelayNS after the
// device read would have them. (The read is not submitted that much
// later: the device's slots model requests in time order, and one
// submitted ahead of the demands behind it would hold a slot they need.)
func (l *lane) prefetchRun(file uint32, first, n uint64, at int64) {
	done := l.dev.submit(at, n) + l.iss.host.AdviseDelayNS
	l.st.PagesRead += n
	l.st.Requests++
	l.st.Prefetched += n
	for p := first; p < first+n; p++ {
		l.cache.insert(file, p, done, flagPrefetched)
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
// (replay drops dentries and inodes): a file's lookup is warm once the
// program or the backend has opened or stat'ed it. A lookup that is warm
// costs Host.OpenNS at most; a cold one what the program's recorded cold
// opens cost, on average, so far.
type paths struct {
	warm              map[uint32]int64 // when a file's lookup became warm
	coldSum, coldOpen int64            // recorded service of the program's cold opens
}

// lookup returns the service time of the program's metadata row of kind k
// on file at now, recorded svc: shorter when the backend made its lookup
// warm first.
func (l *lane) lookup(file uint32, k formats.AccessKind, now, svc int64) int64 {
	if k != formats.KindOpen && k != formats.KindStat {
		return svc
	}
	p := &l.paths
	if w, ok := p.warm[file]; ok && w <= now {
		return min(svc, l.host.OpenNS)
	}
	if k == formats.KindOpen {
		p.coldSum += svc
		p.coldOpen++
	}
	p.warm[file] = now + svc
	return svc
}

// openCost is what the backend's open of file at t costs: a warm lookup's
// Host.OpenNS, or a cold one's estimate; the lookup is warm afterwards.
func (l *lane) openCost(file uint32, t int64) int64 {
	p := &l.paths
	if w, ok := p.warm[file]; ok && w <= t {
		return l.host.OpenNS
	}
	c := l.host.OpenNS
	if p.coldOpen > 0 {
		c = max(c, p.coldSum/p.coldOpen)
	}
	p.warm[file] = t + c
	return c
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
