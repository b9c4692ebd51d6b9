package replay

import (
	"fmt"
	"math/bits"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/internal/harness"
)

// DefaultMaxResidue is the share of the demanded pages that may stay
// cached after eviction before a cold run is refused.
const DefaultMaxResidue = 0.05

// Residue is what of the demanded pages stayed in the page cache after a
// cold run's eviction: pages other processes map or lock, dirty pages, or
// pages under writeback. A run with residue is still cold for every other
// page; Residue says how much and why.
type Residue struct {
	// Pages counts the distinct demanded pages cached when the run began.
	Pages uint64 `json:"pages"`
	// Demanded counts the distinct pages the replay demands.
	Demanded uint64  `json:"demanded_pages"`
	Fraction float64 `json:"fraction"`
	// Warmed counts pages read in so that the run starts with the first
	// run's residue (they had been evicted this time); Extra the pages
	// cached beyond it, which could not be evicted. Runs compare cleanly
	// when Extra is 0.
	Warmed uint64         `json:"warmed_pages,omitempty"`
	Extra  uint64         `json:"extra_pages,omitempty"`
	Files  []ResidueFile  `json:"files,omitempty"`
	sets   map[uint32]set // per file index: the residue's demanded pages
}

// ResidueFile is one file's share of a residue.
type ResidueFile struct {
	Path string `json:"path"`
	// Pages counts its demanded pages that stayed cached; Cached all of
	// its pages that did.
	Pages  uint64 `json:"pages"`
	Cached uint64 `json:"cached_pages"`
	// Why names what keeps them: processes mapping the file, dirty or
	// writeback pages.
	Why string `json:"why"`
}

// set is a page bitmap.
type set []uint64

func newSet(pages uint64) set       { return make(set, (pages+63)/64) }
func (s set) add(p uint64)          { s[p/64] |= 1 << (p % 64) }
func (s set) has(p uint64) bool     { return p/64 < uint64(len(s)) && s[p/64]&(1<<(p%64)) != 0 }
func (s set) count() (n uint64)     { return s.and(nil) }
func (s set) minus(o set) (out set) { return s.op(o, func(a, b uint64) uint64 { return a &^ b }) }
func (s set) op(o set, f func(a, b uint64) uint64) set {
	out := make(set, len(s))
	for i := range s {
		var b uint64
		if i < len(o) {
			b = o[i]
		}
		out[i] = f(s[i], b)
	}
	return out
}

// and counts the pages of s that are also in o (all of s for nil o).
func (s set) and(o set) (n uint64) {
	for i, w := range s {
		if o != nil {
			if i >= len(o) {
				break
			}
			w &= o[i]
		}
		n += uint64(bits.OnesCount64(w))
	}
	return n
}

// demanded returns, per file index, the distinct pages the replay demands.
func (t *trace) demandedSets() (map[uint32]set, uint64) {
	out := map[uint32]set{}
	ps := uint64(t.pageSize)
	for _, th := range t.threads {
		for _, o := range th.ops {
			s := out[o.file]
			if s == nil {
				f := t.files[o.file]
				s = newSet((f.Size + ps - 1) / ps)
				out[o.file] = s
			}
			for p := o.page; p < o.page+uint64(o.n); p++ {
				if p/64 < uint64(len(s)) {
					s.add(p)
				}
			}
		}
	}
	var total uint64
	for _, s := range out {
		total += s.count()
	}
	return out, total
}

// measureResidue returns the demanded pages of files that are cached now;
// with why it says what keeps them (which reads every /proc/PID/maps).
func (r *Replayer) measureResidue(files []*openFile, why bool) (*Residue, error) {
	if r.demanded == nil {
		r.demanded, r.demandedPages = r.t.demandedSets()
	}
	res := &Residue{Demanded: r.demandedPages, sets: map[uint32]set{}}
	for idx, want := range r.demanded {
		f := files[idx]
		if f == nil || f.size == 0 {
			continue
		}
		cached, err := cachedSet(f)
		if err != nil {
			return nil, fmt.Errorf("verify cold %s: %w", f.path, err)
		}
		all := cached.count()
		if all == 0 {
			continue
		}
		left := cached.op(want, func(a, b uint64) uint64 { return a & b })
		res.sets[idx] = left
		n := left.count()
		res.Pages += n
		rf := ResidueFile{Path: f.path, Pages: n, Cached: all}
		if why {
			rf.Why = residueWhy(f)
		}
		res.Files = append(res.Files, rf)
	}
	sort.Slice(res.Files, func(i, j int) bool { return res.Files[i].Pages > res.Files[j].Pages })
	if res.Demanded > 0 {
		res.Fraction = float64(res.Pages) / float64(res.Demanded)
	}
	return res, nil
}

// cachedSet returns the pages of f that mincore reports resident.
func cachedSet(f *openFile) (set, error) {
	ps := uint64(os.Getpagesize())
	pages := (f.size + ps - 1) / ps
	vec := make([]byte, pages)
	err := f.withFD(func(fd int) error {
		mem, err := unix.Mmap(fd, 0, int(f.size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		defer unix.Munmap(mem)
		return mincore(mem, vec)
	})
	if err != nil {
		return nil, err
	}
	s := newSet(pages)
	for p, v := range vec {
		if v&1 != 0 {
			s.add(uint64(p))
		}
	}
	return s, nil
}

// residueWhy says what keeps f's pages cached: dirty or writeback pages
// (cachestat), processes that map it (/proc/PID/maps).
func residueWhy(f *openFile) string {
	var why []string
	var cs unix.Cachestat_t
	if f.withFD(func(fd int) error { return unix.Cachestat(uint(fd), &unix.CachestatRange{}, &cs, 0) }) == nil {
		if cs.Dirty > 0 {
			why = append(why, fmt.Sprintf("%d dirty", cs.Dirty))
		}
		if cs.Writeback > 0 {
			why = append(why, fmt.Sprintf("%d under writeback", cs.Writeback))
		}
	}
	if m := mappers(f.dev, f.ino); m != "" {
		why = append(why, "mapped by "+m)
	}
	if len(why) == 0 {
		return "in use by another process (locked, or mapped and unmapped since)"
	}
	return strings.Join(why, "; ")
}

// mappers names the processes that map the file (dev in the kernel's
// encoding, ino): "12 processes: bash (4711), python3 (4712), ...".
func mappers(dev, ino uint64) string {
	id := harness.FileID{Major: uint32(dev >> 20), Minor: uint32(dev & (1<<20 - 1)), Ino: ino}
	ps := harness.Mappers([]harness.FileID{id})[id]
	for i := range ps {
		if ps[i].PID == os.Getpid() {
			ps[i].Comm = "this replay: " + ps[i].Comm
		}
	}
	return harness.MappersText(ps)
}

// warmTo reads in the pages of ref that res lacks, one page at a time with
// readahead off, so that the run starts with the reference residue; it
// returns how many it read.
func warmTo(files []*openFile, res, ref *Residue) (uint64, error) {
	var n uint64
	ps := int64(os.Getpagesize())
	buf := alignedBuffer(int(ps))
	for idx, want := range ref.sets {
		missing := want.minus(res.sets[idx])
		if missing.count() == 0 {
			continue
		}
		f := files[idx]
		fd, err := unix.Open(f.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return n, fmt.Errorf("warm %s to the first run's residue: %w", f.path, err)
		}
		unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM)
		for p := uint64(0); p < uint64(len(missing))*64; p++ {
			if !missing.has(p) {
				continue
			}
			if _, err := unix.Pread(fd, buf, int64(p)*ps); err != nil {
				unix.Close(fd)
				return n, fmt.Errorf("warm %s page %d: %w", f.path, p, err)
			}
			n++
		}
		unix.Close(fd)
	}
	return n, nil
}

// residueError refuses a cold run whose residue passes the limit.
func residueError(res *Residue, limit float64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d demanded pages (%.2f%%, more than --max-residue %g) stayed cached:",
		res.Pages, res.Demanded, 100*res.Fraction, limit)
	for i, f := range res.Files {
		if i == 8 {
			fmt.Fprintf(&b, "\n  ... %d more files", len(res.Files)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %s: %d demanded pages (%d cached in all): %s", f.Path, f.Pages, f.Cached, f.Why)
	}
	b.WriteString("\nmaterialize the files ('predictio replay materialize BUNDLE DIR') and replay them with --root DIR, where no other process maps them;" +
		" or allow the residue with --max-residue (both runs of a pair see the same), or pass --warm to run (and report) warm")
	return fmt.Errorf("verify cold run: %w after eviction: %s", ErrNotCold, b.String())
}
