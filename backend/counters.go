package backend

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/predictio/predictio/policies"
)

// counters are the request counters of the backends that queue prefetches;
// Stats and Report read them. Every requested page ends in exactly one of
// submitted, cached, past EOF, dropped, refused or stale.
type counters struct {
	requests, pagesRequested, pagesSubmitted, pagesCached, pastEOF atomic.Uint64
	dropped, rejected, failures, inflightMax, throttled            atomic.Uint64
	droppedPages, refusedPages, refused, stalePages                atomic.Uint64
	busyNS, acquireNS, acquires, openNS, opens, adviseNS, advised  atomic.Uint64
	pipelineNS                                                     atomic.Uint64
	firstErr                                                       atomic.Pointer[error]
	firstRefusal                                                   atomic.Pointer[error]
}

// count counts req and returns its pages.
func (c *counters) count(req *policies.Request) (total uint64) {
	c.requests.Add(1)
	for _, r := range req.Ranges {
		total += uint64(r.N)
	}
	c.pagesRequested.Add(total)
	return total
}

// drop counts a request of total pages dropped, throttled if an in-flight
// limit (rather than a full queue) refused it.
func (c *counters) drop(total uint64, throttled bool) {
	c.dropped.Add(1)
	c.droppedPages.Add(total)
	if throttled {
		c.throttled.Add(1)
	}
}

// refuse counts n pages not prefetched because their file could not be
// opened or changed.
func (c *counters) refuse(n uint64, err error) {
	if errors.Is(err, ErrRetired) {
		c.stalePages.Add(n) // the program is done with the file: no warning
		return
	}
	c.refused.Add(1)
	c.refusedPages.Add(n)
	c.firstRefusal.CompareAndSwap(nil, &err)
}

// fail counts an I/O error.
func (c *counters) fail(err error) {
	c.failures.Add(1)
	c.firstErr.CompareAndSwap(nil, &err)
}

// noteInFlight raises the in-flight high-water mark to n.
func (c *counters) noteInFlight(n uint64) {
	for {
		m := c.inflightMax.Load()
		if n <= m || c.inflightMax.CompareAndSwap(m, n) {
			return
		}
	}
}

// Stats reports the counters.
func (c *counters) Stats() policies.BackendStats {
	return policies.BackendStats{
		Requests:       c.requests.Load(),
		PagesRequested: c.pagesRequested.Load(),
		PagesSubmitted: c.pagesSubmitted.Load(),
		PagesCached:    c.pagesCached.Load(),
		PagesPastEOF:   c.pastEOF.Load(),
		Dropped:        c.dropped.Load(),
		Rejected:       c.rejected.Load(),
		Failures:       c.failures.Load(),
		InFlightMax:    c.inflightMax.Load(),
		Throttled:      c.throttled.Load(),
	}
}

// report returns the counters as a Report with via.
func (c *counters) report(via string) Report {
	r := Report{Stats: c.Stats(), PagesDropped: c.droppedPages.Load(), PagesRefused: c.refusedPages.Load(), PagesStale: c.stalePages.Load(), Via: via,
		BusyNS: c.busyNS.Load(), AcquireNS: c.acquireNS.Load(), Acquires: c.acquires.Load(),
		OpenNS: c.openNS.Load(), Opens: c.opens.Load(),
		AdviseNS: c.adviseNS.Load(), Advised: c.advised.Load(), PipelineNS: c.pipelineNS.Load()}
	if e := c.firstErr.Load(); e != nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d prefetch failures, first: %v", r.Stats.Failures, *e))
	}
	if e := c.firstRefusal.Load(); e != nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d requests (%d pages) refused, first: %v", c.refused.Load(), r.PagesRefused, *e))
	}
	return r
}

// ClipEOF clips r at page eof (end of file): it returns how many of r's
// pages lie before eof, and whether r starts before eof at all.
func ClipEOF(r policies.Range, eof uint64) (n uint64, ok bool) {
	if r.First >= eof {
		return 0, false
	}
	return min(uint64(r.N), eof-r.First), true
}

// pagesOf returns a size-byte file's length in ps-byte pages, rounded up.
func pagesOf(size uint64, ps int) uint64 {
	return (size + uint64(ps) - 1) / uint64(ps)
}
