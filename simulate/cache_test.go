package simulate

import (
	"container/list"
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// refLRU is an obviously correct LRU: a map and a container/list, front
// most recent.
type refLRU struct {
	cap   int
	l     *list.List
	where map[uint64]*list.Element
}

func newRefLRU(capacity int) *refLRU {
	return &refLRU{cap: capacity, l: list.New(), where: map[uint64]*list.Element{}}
}

func (r *refLRU) access(k uint64) (hit bool, evicted uint64, didEvict bool) {
	if e, ok := r.where[k]; ok {
		r.l.MoveToFront(e)
		return true, 0, false
	}
	if r.l.Len() == r.cap {
		b := r.l.Back()
		evicted, didEvict = b.Value.(uint64), true
		r.l.Remove(b)
		delete(r.where, evicted)
	}
	r.where[k] = r.l.PushFront(k)
	return false, evicted, didEvict
}

func (r *refLRU) keys() []uint64 {
	var ks []uint64
	for e := r.l.Front(); e != nil; e = e.Next() {
		ks = append(ks, e.Value.(uint64))
	}
	return ks
}

// ref2Q is an obviously correct active/inactive pair: slices, index 0 most
// recent, with the documented rules (new pages enter the inactive head; a
// hit on an inactive page sets referenced, a second one promotes it to the
// active head; the active list is kept at most half the cache by demoting
// its tail to the inactive head; eviction takes the inactive tail, else
// the active tail).
type ref2Q struct {
	cap              int
	inactive, active []uint64
	referenced       map[uint64]bool
}

func (r *ref2Q) access(k uint64) (hit bool, evicted uint64, didEvict bool) {
	if i := slices.Index(r.active, k); i >= 0 {
		r.active = slices.Insert(slices.Delete(r.active, i, i+1), 0, k)
		return true, 0, false
	}
	if i := slices.Index(r.inactive, k); i >= 0 {
		if !r.referenced[k] {
			r.referenced[k] = true
			return true, 0, false
		}
		delete(r.referenced, k)
		r.inactive = slices.Delete(r.inactive, i, i+1)
		r.active = slices.Insert(r.active, 0, k)
		for len(r.active) > r.cap/2 {
			t := r.active[len(r.active)-1]
			r.active = r.active[:len(r.active)-1]
			r.inactive = slices.Insert(r.inactive, 0, t)
		}
		return true, 0, false
	}
	if len(r.inactive)+len(r.active) == r.cap {
		didEvict = true
		if n := len(r.inactive); n > 0 {
			evicted, r.inactive = r.inactive[n-1], r.inactive[:n-1]
		} else {
			n := len(r.active)
			evicted, r.active = r.active[n-1], r.active[:n-1]
		}
		delete(r.referenced, evicted)
	}
	r.inactive = slices.Insert(r.inactive, 0, k)
	return false, evicted, didEvict
}

// order returns the keys of the live entries of q, most recent first.
func (c *pageCache) order(q *queue) []uint64 {
	var keys []uint64
	for i := q.tail; i > q.head; i-- {
		if r := q.buf[(i-1)&uint64(len(q.buf)-1)]; c.live(r) {
			keys = append(keys, c.entries[r.idx].key)
		}
	}
	return keys
}

// indexModes are the ways pages reach the cache's two indexes: all in the
// hash index (no file sizes), all in direct tables, and a mix where file 1
// has no size, file 2 a table shorter than the pages accessed and file 0
// a full table.
var indexModes = map[string]func(uint32) uint64{
	"hash":   nil,
	"direct": func(uint32) uint64 { return 1 << 12 },
	"mixed": func(f uint32) uint64 {
		switch f {
		case 1:
			return 0
		case 2:
			return 100
		}
		return 1 << 12
	},
}

func key2(k uint64) (uint32, uint64) { return uint32(k >> 40), k & maxPage }

// checkAgainst drives c and a reference with the same random accesses and
// compares hits and evictions one by one.
func checkAgainst(t *testing.T, c *pageCache, access func(uint64) (bool, uint64, bool), capacity int, seed int64) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	var evicted []uint64
	c.onEvict = func(e *entry) { evicted = append(evicted, e.key) }
	for i := 0; i < 20000; i++ {
		k := pageKey(uint32(rng.Intn(3)), uint64(rng.Intn(capacity*3)))
		if rng.Intn(4) == 0 { // some locality, so that 2q promotes
			k = pageKey(0, uint64(rng.Intn(max(capacity/2, 1))))
		}
		evicted = evicted[:0]
		idx := c.lookup(key2(k))
		hit, ev, didEvict := access(k)
		if (idx >= 0) != hit {
			t.Fatalf("op %d key %x: cache hit %v, reference %v", i, k, idx >= 0, hit)
		}
		if hit {
			if c.entries[idx].key != k {
				t.Fatalf("op %d: lookup of %x found entry of %x", i, k, c.entries[idx].key)
			}
			c.touch(idx)
			continue
		}
		f, p := key2(k)
		c.insert(f, p, 0, 0)
		if didEvict != (len(evicted) == 1) || (didEvict && evicted[0] != ev) {
			t.Fatalf("op %d: evicted %x, reference evicted %x (%v)", i, evicted, ev, didEvict)
		}
	}
}

func TestCacheLRUMatchesReference(t *testing.T) {
	for mode, fp := range indexModes {
		for _, capacity := range []int{1, 2, 7, 64, 300} {
			t.Run(fmt.Sprintf("%s/%d", mode, capacity), func(t *testing.T) {
				c := newPageCache(LRU, capacity, fp)
				ref := newRefLRU(capacity)
				checkAgainst(t, c, ref.access, capacity, int64(capacity))
				if c.len() != ref.l.Len() {
					t.Fatalf("%d entries, reference %d", c.len(), ref.l.Len())
				}
				for _, k := range ref.keys() {
					if c.lookup(key2(k)) < 0 {
						t.Fatalf("key %x lost from the index", k)
					}
				}
				if got := c.order(&c.inactive); !slices.Equal(got, ref.keys()) {
					t.Fatalf("queue order differs from reference")
				}
			})
		}
	}
}

func TestCacheTwoListMatchesReference(t *testing.T) {
	for mode, fp := range indexModes {
		for _, capacity := range []int{1, 2, 7, 64, 300} {
			t.Run(fmt.Sprintf("%s/%d", mode, capacity), func(t *testing.T) {
				c := newPageCache(TwoList, capacity, fp)
				ref := &ref2Q{cap: capacity, referenced: map[uint64]bool{}}
				checkAgainst(t, c, ref.access, capacity, int64(capacity)+100)
				if got := c.order(&c.active); !slices.Equal(got, ref.active) {
					t.Fatalf("active order differs from reference:\n%x\n%x", got, ref.active)
				}
				if got := c.order(&c.inactive); !slices.Equal(got, ref.inactive) {
					t.Fatalf("inactive order differs from reference")
				}
				if c.active.n != len(ref.active) || c.inactive.n != len(ref.inactive) {
					t.Fatalf("list sizes %d+%d, reference %d+%d", c.active.n, c.inactive.n, len(ref.active), len(ref.inactive))
				}
			})
		}
	}
}

func TestCacheTwoListKeepsHotPages(t *testing.T) {
	// A hot set referenced twice survives a one-pass scan larger than the
	// cache under 2q, and is flushed by it under LRU.
	for _, tc := range []struct {
		model   CacheModel
		survive bool
	}{{LRU, false}, {TwoList, true}} {
		c := newPageCache(tc.model, 100, nil)
		access := func(f uint32, p uint64) {
			if idx := c.lookup(f, p); idx >= 0 {
				c.touch(idx)
			} else {
				c.insert(f, p, 0, 0)
			}
		}
		for round := 0; round < 3; round++ {
			for k := uint64(0); k < 20; k++ {
				access(1, k)
			}
		}
		for k := uint64(0); k < 1000; k++ {
			access(2, k)
		}
		hot := 0
		for k := uint64(0); k < 20; k++ {
			if c.lookup(1, k) >= 0 {
				hot++
			}
		}
		if got := hot == 20; got != tc.survive {
			t.Errorf("%v: %d of 20 hot pages survived the scan; want all survive = %v", tc.model, hot, tc.survive)
		}
		if c.active.n > 50 {
			t.Errorf("%v: active list has %d pages, over half of 100", tc.model, c.active.n)
		}
		if c.active.n+c.inactive.n != c.len() || c.len() != 100 {
			t.Errorf("%v: lists hold %d+%d, entries %d, want 100", tc.model, c.active.n, c.inactive.n, c.len())
		}
	}
}

func TestCacheIndexSurvivesChurn(t *testing.T) {
	// Many evictions exercise tombstones, rebuilds and direct tables; every
	// cached key must stay findable and no evicted key may be found.
	for mode, fp := range indexModes {
		t.Run(mode, func(t *testing.T) {
			c := newPageCache(TwoList, 257, fp)
			rng := rand.New(rand.NewSource(1))
			present := map[uint64]bool{}
			c.onEvict = func(e *entry) { delete(present, e.key) }
			for i := 0; i < 50000; i++ {
				f, p := uint32(rng.Intn(5)), uint64(rng.Intn(2000))
				k := pageKey(f, p)
				if idx := c.lookup(f, p); idx >= 0 {
					if !present[k] {
						t.Fatalf("op %d: evicted key %x still indexed", i, k)
					}
					c.touch(idx)
					continue
				}
				if present[k] {
					t.Fatalf("op %d: cached key %x not found", i, k)
				}
				c.insert(f, p, 0, 0)
				present[k] = true
			}
			for k := range present {
				if c.lookup(key2(k)) < 0 {
					t.Fatalf("cached key %x not found", k)
				}
			}
			if mode == "hash" && c.hashed != c.len() || mode == "direct" && c.hashed != 0 {
				t.Errorf("%d of %d entries hashed", c.hashed, c.len())
			}
		})
	}
}

// TestCacheDirectBudget: direct tables stop at the budget; files beyond it
// are hashed, and lookups stay correct.
func TestCacheDirectBudget(t *testing.T) {
	c := newPageCache(LRU, 16, func(uint32) uint64 { return 1 << 19 })
	// Budget: 16*16 + 2^20 pages: two files of 2^19 pages fit, a third
	// does not.
	for f := uint32(0); f < 3; f++ {
		c.insert(f, 7, 0, 0)
	}
	if len(c.direct[0]) == 0 || len(c.direct[1]) == 0 || len(c.direct[2]) != 0 || c.hashed != 1 {
		t.Fatalf("tables %d %d %d, hashed %d: want two tables and one hashed page", len(c.direct[0]), len(c.direct[1]), len(c.direct[2]), c.hashed)
	}
	for f := uint32(0); f < 3; f++ {
		if c.lookup(f, 7) < 0 || c.lookup(f, 8) >= 0 {
			t.Errorf("file %d: lookups wrong", f)
		}
	}
}
