package replay

import (
	"sync/atomic"

	"github.com/predictio/predictio/policies"
)

// prefetchCounters are the request counters of the backends that queue
// prefetches (page cache and direct); Stats reports them.
type prefetchCounters struct {
	requests, pagesRequested, pagesSubmitted, pagesCached, pastEOF atomic.Uint64
	dropped, rejected, failures, inflightMax, throttled            atomic.Uint64
	droppedPages                                                   atomic.Uint64
	firstErr                                                       atomic.Pointer[error]
}

// admit counts req and returns the end-of-file page of its file and how
// many of its pages lie before it; pages past end of file are counted.
// ok is false where req names no open file (counted as rejected) or has no
// page inside the file: there is nothing to queue then.
func (c *prefetchCounters) admit(req *policies.Request, files []*openFile, ps int) (eof, total uint64, ok bool) {
	c.requests.Add(1)
	if int(req.File) >= len(files) || files[req.File] == nil {
		c.rejected.Add(1)
		return 0, 0, false
	}
	eof = files[req.File].pages(ps)
	for _, r := range req.Ranges {
		c.pagesRequested.Add(uint64(r.N))
		n, _ := clipEOF(r, eof)
		if past := uint64(r.N) - n; past > 0 {
			c.pastEOF.Add(past)
		}
		total += n
	}
	return eof, total, total > 0
}

// drop counts a request of total pages dropped, throttled if an in-flight
// limit (rather than a full queue) refused it.
func (c *prefetchCounters) drop(total uint64, throttled bool) {
	c.dropped.Add(1)
	c.droppedPages.Add(total)
	if throttled {
		c.throttled.Add(1)
	}
}

// Stats reports the counters.
func (c *prefetchCounters) Stats() policies.BackendStats {
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
