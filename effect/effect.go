// Package effect counts what prefetched pages were worth: used in time
// (resident, its read complete, before the demand that needed it), late
// (the demand waited for its read) or wasted (evicted or never demanded).
// replay and the live runtime report the same three counters,
// pages_used_in_time, pages_late and pages_wasted.
//
// For the page cache an Observer follows the kernel with eBPF (package
// bpf, effect.bpf.c): every page-cache insert into a watched file is
// attributed to the thread that made it, and a page inserted by a
// prefetcher (not by a demand thread) is classified at its first demand
// lookup. Counting is done in the kernel, per file; nothing is copied to
// user space per event. A user-space cache (replay's direct backend)
// counts the same Counts itself.
package effect

import "fmt"

// Counts are prefetched pages by effect. At the end of a run (Final),
// Prefetched = UsedInTime + Late + Wasted; while it runs, pages not yet
// demanded are Pending instead of Wasted.
type Counts struct {
	// Prefetched pages: inserted into the cache by a prefetcher.
	Prefetched uint64 `json:"pages_prefetched"`
	// UsedInTime pages were resident and up to date at their first demand.
	UsedInTime uint64 `json:"pages_used_in_time"`
	// Late pages were still being read when their first demand began: the
	// demand waited for them.
	Late uint64 `json:"pages_late"`
	// Wasted pages were evicted before any demand, or never demanded.
	Wasted uint64 `json:"pages_wasted"`
	// Evicted counts the wasted pages that were evicted unused.
	Evicted uint64 `json:"pages_evicted_unused"`
	// Pending pages are prefetched and not demanded yet.
	Pending uint64 `json:"pages_pending,omitempty"`
	// DemandRead counts pages the demand itself read into the cache (its
	// misses, including the kernel's readahead on its behalf).
	DemandRead uint64 `json:"pages_demand_read"`
	// Foreign counts pages of the watched files read in by anybody else.
	Foreign uint64 `json:"pages_foreign,omitempty"`
	// Untracked counts prefetched pages the observer could not follow (its
	// table of pending pages was full); they are not in Prefetched.
	Untracked uint64 `json:"pages_untracked,omitempty"`
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Prefetched += o.Prefetched
	c.UsedInTime += o.UsedInTime
	c.Late += o.Late
	c.Wasted += o.Wasted
	c.Evicted += o.Evicted
	c.Pending += o.Pending
	c.DemandRead += o.DemandRead
	c.Foreign += o.Foreign
	c.Untracked += o.Untracked
}

// Settle turns pending pages into wasted ones: the run is over.
func (c *Counts) Settle() {
	c.Wasted += c.Pending
	c.Pending = 0
}

// Check reports an error when the counts do not add up.
func (c *Counts) Check() error {
	if got := c.UsedInTime + c.Late + c.Wasted + c.Pending; got != c.Prefetched {
		return fmt.Errorf("check effect counts: used in time %d + late %d + wasted %d + pending %d = %d, want prefetched %d",
			c.UsedInTime, c.Late, c.Wasted, c.Pending, got, c.Prefetched)
	}
	if c.Evicted > c.Wasted {
		return fmt.Errorf("check effect counts: evicted %d > wasted %d", c.Evicted, c.Wasted)
	}
	return nil
}

func (c Counts) String() string {
	return fmt.Sprintf("prefetched %d: used in time %d, late %d, wasted %d (%d evicted), pending %d; demand read %d, foreign %d, untracked %d",
		c.Prefetched, c.UsedInTime, c.Late, c.Wasted, c.Evicted, c.Pending, c.DemandRead, c.Foreign, c.Untracked)
}
