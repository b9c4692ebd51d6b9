package policies

import "math/bits"

// ondemand61 is Linux 6.1's ondemand_readahead, behind both
// page_cache_sync_ra (async false) and page_cache_async_ra (async true,
// triggered by a marked folio of the given order).
func (r *Readahead) ondemand61(f *raFile, index, req uint64, async bool, order, eof uint64) {
	st := &f.st
	max := f.maxPages(req)
	switch {
	case index == 0:
		r.initialWindow61(st, index, req, max)
	case index == (st.Start+st.Size-st.AsyncSize)&^(1<<order-1) || index == st.Start+st.Size:
		// The expected index: assume sequential access, ramp up.
		st.Start += st.Size
		st.Size = maxU(st.Size, nextRASize(st.Size, max))
		st.AsyncSize = st.Size
	case async:
		// A marked folio without valid state (interleaved reads): the
		// gap after it tells the previous window's size.
		start := r.nextMiss(f, index+1, max)
		if start == 0 || start-index > max {
			return
		}
		st.Start = start
		st.Size = nextRASize(start-index+req, max)
		st.AsyncSize = st.Size
	case req > max, index-uint64(st.PrevPos)>>12 <= 1:
		// Oversized read or sequential cache miss.
		r.initialWindow61(st, index, req, max)
	default:
		// try_context_readahead: the cached history before index.
		size := index - 1 - r.prevMiss(f, index-1, max)
		if size <= req {
			r.doPageCacheRA(f, index, req, 0, eof) // small random read
			return
		}
		if size >= index {
			size *= 2 // cached from the start of the file
		}
		st.Start = index
		st.Size = min(size+req, max)
		st.AsyncSize = 1
	}
	// Will this read hit the marker it is about to set? Then merge the
	// next window into this one.
	if index == st.Start && st.Size == st.AsyncSize {
		add := nextRASize(st.Size, max)
		if st.Size+add <= max {
			st.AsyncSize = add
			st.Size += add
		} else {
			st.Size = max
			st.AsyncSize = max >> 1
		}
	}
	r.raOrder(f, eof, order)
}

func (r *Readahead) initialWindow61(st *RAState, index, req, max uint64) {
	st.Start = index
	st.Size = initRASize(req, max)
	if st.Size > req {
		st.AsyncSize = st.Size - req
	} else {
		st.AsyncSize = st.Size
	}
}

// raOrder is page_cache_ra_order: allocate the window [Start, Start+Size)
// in folios and mark the folio holding Start+Size-AsyncSize. order is the
// caller's folio order on 6.1 and 6.12 (0 for sync and mmap windows, the
// marked folio's for async ones); 6.18 takes it from the state.
func (r *Readahead) raOrder(f *raFile, eof, order uint64) {
	r.windowed(f)
	st := &f.st
	switch {
	case !f.large:
		if r.era == era618 {
			st.Order = 0
		}
		r.doPageCacheRA(f, st.Start, st.Size, st.AsyncSize, eof)
	case r.era == era618:
		r.raOrder618(f, eof)
	case r.era == era612:
		r.raOrder612(f, eof, order)
	default:
		r.raOrder61(f, eof, order)
	}
}

// limitOf returns the last page a window of f may allocate: the window's
// last page or the file's, whichever comes first.
func limitOf(st *RAState, eof uint64) uint64 {
	limit := st.Start + st.Size - 1
	if eof > 0 && eof-1 < limit {
		limit = eof - 1
	}
	return limit
}

// allocFolios allocates folios over [idx, limit] as page_cache_ra_order's
// loop does, with the largest order order(idx) allows at each step; it
// stops at the first folio that collides with a cached page and returns
// where it stopped and whether it collided.
func (r *Readahead) allocFolios(f *raFile, idx, limit, mark uint64, order func(idx uint64) uint64) (uint64, bool) {
	for idx <= limit {
		o := order(idx)
		n := uint64(1) << o
		for i := range n {
			if r.present(f, idx+i) {
				return idx, true
			}
		}
		r.insert(f, idx, uint8(o), mark&^(n-1) == idx)
		idx += n
	}
	return idx, false
}

// raOrder618 is Linux 6.18's page_cache_ra_order for large folios: up to
// order min(9, ra->order, log2 size), aligned, not past EOF.
func (r *Readahead) raOrder618(f *raFile, eof uint64) {
	st := &f.st
	start := st.Start
	if eof > 0 && start >= eof {
		return // limit < index: nothing allocated, no fallback reads
	}
	// Linux 6.18 marks the folio at start+size-async even when the
	// window reaches end of file (later kernels skip the mark there).
	limit := limitOf(st, eof)
	mark := start + st.Size - st.AsyncSize
	newOrder := min(uint64(maxPagecacheOrder), uint64(st.Order), uint64(bits.Len64(st.Size)-1))
	st.Order = uint32(newOrder)
	idx, failed := r.allocFolios(f, start, limit, mark, func(idx uint64) uint64 {
		o := newOrder
		if idx&(1<<o-1) != 0 {
			o = uint64(bits.TrailingZeros64(idx))
		}
		for o > 0 && idx+(1<<o)-1 > limit {
			o--
		}
		return o
	})
	if failed && st.Size > idx-start {
		r.doPageCacheRA(f, idx, st.Size-(idx-start), st.AsyncSize, eof)
	}
}

// raOrder612 is Linux 6.12's page_cache_ra_order for large folios: the
// caller's order + 2, capped by 9 and log2 size; windows under 4 pages
// and collisions fall back to order-0 pages (after a collision, for the
// whole window size again, from where allocation stopped).
func (r *Readahead) raOrder612(f *raFile, eof, order uint64) {
	st := &f.st
	start := st.Start
	if st.Size < 4 {
		r.doPageCacheRA(f, start, st.Size, st.AsyncSize, eof)
		return
	}
	if eof > 0 && start >= eof {
		return
	}
	limit := limitOf(st, eof)
	mark := start + st.Size - st.AsyncSize
	newOrder := order
	if newOrder < maxPagecacheOrder {
		newOrder += 2
	}
	newOrder = min(newOrder, maxPagecacheOrder, uint64(bits.Len64(st.Size)-1))
	idx, failed := r.allocFolios(f, start, limit, mark, func(idx uint64) uint64 {
		o := newOrder
		if idx&(1<<o-1) != 0 {
			o = uint64(bits.TrailingZeros64(idx))
		}
		for o > 0 && idx+(1<<o)-1 > limit {
			o--
		}
		return o
	})
	if failed {
		r.doPageCacheRA(f, idx, st.Size, st.AsyncSize, eof)
	}
}

// raOrder61 is Linux 6.1's page_cache_ra_order for large folios: like
// 6.12 but without order-1 folios, and a window cut at EOF grows by what
// the last folio covered beyond the limit.
func (r *Readahead) raOrder61(f *raFile, eof, order uint64) {
	st := &f.st
	start := st.Start
	if st.Size < 4 {
		r.doPageCacheRA(f, start, st.Size, st.AsyncSize, eof)
		return
	}
	limit := limitOf(st, eof)
	mark := start + st.Size - st.AsyncSize
	newOrder := order
	if newOrder < maxPagecacheOrder {
		newOrder = min(newOrder+2, maxPagecacheOrder)
		for 1<<newOrder > st.Size {
			newOrder--
		}
	}
	idx, failed := r.allocFolios(f, start, limit, mark, func(idx uint64) uint64 {
		o := newOrder
		if idx&(1<<o-1) != 0 {
			if o = uint64(bits.TrailingZeros64(idx)); o == 1 {
				o = 0
			}
		}
		for idx+(1<<o)-1 > limit {
			if o--; o == 1 {
				o = 0
			}
		}
		return o
	})
	if idx > limit {
		st.Size += idx - limit - 1
		st.AsyncSize += idx - limit - 1
	}
	if failed {
		r.doPageCacheRA(f, idx, st.Size, st.AsyncSize, eof)
	}
}

// doPageCacheRA is do_page_cache_ra + page_cache_ra_unbounded: order-0
// pages, skipping present ones, marking page nr-lookahead.
func (r *Readahead) doPageCacheRA(f *raFile, index, nr, lookahead, eof uint64) {
	if eof > 0 {
		if index > eof-1 {
			return
		}
		if nr > eof-1-index {
			nr = eof - index
		}
	}
	mark := nr - lookahead
	for i := range nr {
		if r.present(f, index+i) {
			continue
		}
		r.insert(f, index+i, 0, i == mark && lookahead > 0)
	}
}

// xarray leaf nodes hold 64 slots; folios of order 1 to 5 occupy several
// slots of one leaf (a canonical slot plus sibling slots).
const xaChunkMask = 63

// lag returns how far page p is from the canonical slot of its folio
// when that folio lives in an xarray leaf node (order 1 to 5). A walk
// started there with xas_next/xas_prev reads slots that far behind the
// index it reports, until it crosses the leaf's boundary; the kernel's
// page_cache_next_miss and page_cache_prev_miss inherit that, and so does
// this model.
func (r *Readahead) lag(f *raFile, p uint64) uint64 {
	b := f.pages.get(p)
	if b&raPresent == 0 || r.cfg.Resident != nil && !r.cfg.Resident(f.id, p) {
		return 0
	}
	o := b & raOrder
	if o == 0 || o > 5 {
		return 0
	}
	return p & (1<<o - 1)
}

// nextMiss is page_cache_next_miss(index, max): the first index of a gap
// in [index, index+max), or index+max when there is none (index+max-1 on
// Linux 6.1, the last index it looked at).
func (r *Readahead) nextMiss(f *raFile, index, max uint64) uint64 {
	rep, off := index, index-r.lag(f, index)
	act := index // the first load reads the folio itself
	for n := max; n > 0; n-- {
		if !r.present(f, act) {
			return rep
		}
		if off&xaChunkMask == xaChunkMask {
			rep++
			off = rep // climbs to the parent and descends at rep
		} else {
			rep++
			off++
		}
		act = off
		if rep == 0 {
			return 0 // wrapped
		}
	}
	if r.era == era61 && max > 0 {
		// 6.1 returns the index of the last slot it loaded.
		return rep - 1
	}
	return rep
}

// prevMiss is page_cache_prev_miss(index, max): the last index of a gap
// in [index-max+1, index], index-max when there is none, or ULONG_MAX when
// the walk wrapped below page 0. A walk that starts lagging (see lag)
// keeps reading a block below the index it reports once it crosses a leaf
// boundary, as the kernel's xas_prev does; the gap it reports is then the
// index it had reached when it read an empty slot.
func (r *Readahead) prevMiss(f *raFile, index, max uint64) uint64 {
	rep, act := index, index
	off := index - r.lag(f, index)
	for n := max; n > 0; n-- {
		if !r.present(f, act) {
			return rep
		}
		if off&xaChunkMask != 0 {
			rep--
			off--
			act = off
			continue
		}
		rep--
		if rep&xaChunkMask == 0 && rep == off {
			act = off // offset already matches: re-read the same slot
			continue
		}
		// The offset wraps: climb until a slot to the left exists, then
		// descend at rep's offsets.
		k := uint(6)
		for (off>>k)&xaChunkMask == 0 {
			if off>>k == 0 {
				return rep // fell off the root: set_bounds, NULL
			}
			k += 6
		}
		off = ((off>>k)-1)<<k | rep&(1<<k-1)
		act = off
		if !r.blockUsed(f, act) {
			return rep
		}
	}
	return rep
}

// blockUsed reports whether any page of the 64-page xarray leaf holding p
// is present, i.e. whether the leaf node exists.
func (r *Readahead) blockUsed(f *raFile, p uint64) bool {
	base := p &^ xaChunkMask
	for i := range uint64(64) {
		if r.present(f, base+i) {
			return true
		}
	}
	return false
}
