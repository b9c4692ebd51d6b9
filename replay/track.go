package replay

import (
	"math/bits"
	"sync/atomic"
)

// tracker records which pages a backend prefetched and which of those a
// demand access used afterwards, with one bit per page and file. It is safe
// for concurrent use and allocates only at creation.
type tracker struct {
	pre  [][]uint64
	used [][]uint64
}

func newTracker(files []*openFile, ps int) *tracker {
	t := &tracker{pre: make([][]uint64, len(files)), used: make([][]uint64, len(files))}
	for i, f := range files {
		if f == nil {
			continue
		}
		n := (f.size + uint64(ps) - 1) / uint64(ps)
		t.pre[i] = make([]uint64, (n+63)/64)
		t.used[i] = make([]uint64, (n+63)/64)
	}
	return t
}

// prefetched marks pages [first, first+n) of file as prefetched.
func (t *tracker) prefetched(file uint32, first uint64, n uint64) {
	w := t.pre[file]
	for p := first; p < first+n; p++ {
		if i := p / 64; i < uint64(len(w)) {
			atomic.OrUint64(&w[i], 1<<(p%64))
		}
	}
}

// demanded marks pages [first, first+n) of file as used where they were
// prefetched before.
func (t *tracker) demanded(file uint32, first uint64, n uint64) {
	pw, uw := t.pre[file], t.used[file]
	for p := first; p < first+n; {
		i := p / 64
		if i >= uint64(len(pw)) {
			return
		}
		// Bits of word i covered by [p, first+n).
		lo := p % 64
		hi := uint64(64)
		if end := first + n; end < (i+1)*64 {
			hi = end - i*64
		}
		mask := (^uint64(0) << lo) & (^uint64(0) >> (64 - hi))
		if m := atomic.LoadUint64(&pw[i]) & mask; m != 0 {
			atomic.OrUint64(&uw[i], m)
		}
		p = (i + 1) * 64
	}
}

// counts returns pages prefetched and pages of those used.
func (t *tracker) counts() (prefetched, used uint64) {
	for f := range t.pre {
		for i := range t.pre[f] {
			prefetched += uint64(bits.OnesCount64(atomic.LoadUint64(&t.pre[f][i])))
			used += uint64(bits.OnesCount64(atomic.LoadUint64(&t.used[f][i])))
		}
	}
	return prefetched, used
}
