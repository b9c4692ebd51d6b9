package simulate

import (
	"math/rand"
	"slices"
	"testing"
)

// refLRU is an obviously correct LRU: keys[0] is the most recent.
type refLRU struct {
	cap  int
	keys []uint64
}

func (r *refLRU) access(k uint64) (hit bool, evicted uint64, didEvict bool) {
	if i := slices.Index(r.keys, k); i >= 0 {
		r.keys = slices.Delete(r.keys, i, i+1)
		r.keys = slices.Insert(r.keys, 0, k)
		return true, 0, false
	}
	if len(r.keys) == r.cap {
		evicted = r.keys[len(r.keys)-1]
		didEvict = true
		r.keys = r.keys[:len(r.keys)-1]
	}
	r.keys = slices.Insert(r.keys, 0, k)
	return false, evicted, didEvict
}

func TestCacheLRUMatchesReference(t *testing.T) {
	for _, capacity := range []int{1, 2, 7, 64, 300} {
		rng := rand.New(rand.NewSource(int64(capacity)))
		c := newPageCache(LRU, capacity)
		var evicted []uint64
		c.onEvict = func(e *entry) { evicted = append(evicted, e.key) }
		ref := &refLRU{cap: capacity}
		for i := 0; i < 20000; i++ {
			k := pageKey(uint32(rng.Intn(3)), uint64(rng.Intn(capacity*3)))
			evicted = evicted[:0]
			idx := c.lookup(k)
			hit, ev, didEvict := ref.access(k)
			if (idx >= 0) != hit {
				t.Fatalf("cap %d op %d key %x: cache hit %v, reference %v", capacity, i, k, idx >= 0, hit)
			}
			if hit {
				c.touch(idx)
				continue
			}
			c.insert(k, 0, 0)
			if didEvict != (len(evicted) == 1) || (didEvict && evicted[0] != ev) {
				t.Fatalf("cap %d op %d: evicted %x, reference evicted %x (%v)", capacity, i, evicted, ev, didEvict)
			}
		}
		if c.len() != len(ref.keys) {
			t.Fatalf("cap %d: %d entries, reference %d", capacity, c.len(), len(ref.keys))
		}
		for _, k := range ref.keys {
			if c.lookup(k) < 0 {
				t.Fatalf("cap %d: key %x lost from the index", capacity, k)
			}
		}
		// Walk the list: it must be the reference order.
		var got []uint64
		for i := c.inactive.head; i >= 0; i = c.entries[i].next {
			got = append(got, c.entries[i].key)
		}
		if !slices.Equal(got, ref.keys) {
			t.Fatalf("cap %d: list order differs from reference", capacity)
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
		c := newPageCache(tc.model, 100)
		access := func(k uint64) {
			if idx := c.lookup(k); idx >= 0 {
				c.touch(idx)
			} else {
				c.insert(k, 0, 0)
			}
		}
		for round := 0; round < 3; round++ {
			for k := uint64(0); k < 20; k++ {
				access(pageKey(1, k))
			}
		}
		for k := uint64(0); k < 1000; k++ {
			access(pageKey(2, k))
		}
		hot := 0
		for k := uint64(0); k < 20; k++ {
			if c.lookup(pageKey(1, k)) >= 0 {
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
	// Many evictions exercise backward-shift deletion; every cached key
	// must stay findable and no evicted key may be found.
	c := newPageCache(TwoList, 257)
	rng := rand.New(rand.NewSource(1))
	present := map[uint64]bool{}
	c.onEvict = func(e *entry) { delete(present, e.key) }
	for i := 0; i < 50000; i++ {
		k := pageKey(uint32(rng.Intn(5)), uint64(rng.Intn(2000)))
		if idx := c.lookup(k); idx >= 0 {
			if !present[k] {
				t.Fatalf("op %d: evicted key %x still indexed", i, k)
			}
			c.touch(idx)
			continue
		}
		if present[k] {
			t.Fatalf("op %d: cached key %x not found", i, k)
		}
		c.insert(k, 0, 0)
		present[k] = true
	}
	for k := range present {
		if c.lookup(k) < 0 {
			t.Fatalf("cached key %x not found", k)
		}
	}
}
