package backend

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/predictio/predictio/internal/testenv"
	"github.com/predictio/predictio/policies"
)

// checkSum checks that every requested page ended in exactly one
// category.
func checkSum(t *testing.T, rep Report) {
	t.Helper()
	s := rep.Stats
	if got := s.PagesSubmitted + s.PagesCached + s.PagesPastEOF + rep.PagesDropped + rep.PagesRefused + rep.PagesStale; got != s.PagesRequested {
		t.Errorf("submitted %d + cached %d + past EOF %d + dropped %d + refused %d + stale %d = %d, want requested %d",
			s.PagesSubmitted, s.PagesCached, s.PagesPastEOF, rep.PagesDropped, rep.PagesRefused, rep.PagesStale, got, s.PagesRequested)
	}
}

func req(id uint32, first uint64, n uint32) *policies.Request {
	return &policies.Request{File: id, Ranges: []policies.Range{{First: first, N: n}}}
}

// coldFile writes a file of pages pages, opens it and evicts it.
func coldFile(t *testing.T, pages int) (string, *os.File) {
	t.Helper()
	p := writeFile(t, scratchDir(t), "data", pages)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	evictFile(t, f)
	return p, f
}

func cached(t *testing.T, f *os.File, first, n uint64) uint64 {
	t.Helper()
	ps := uint64(os.Getpagesize())
	c, err := cachedPages(int(f.Fd()), first*ps, n*ps)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestKernelPrefetches: the kernel backend makes requested pages of a cold
// file resident, through io_uring FADVISE and through readahead(2), and
// reports each page it issued. It fails if the advice did nothing.
func TestKernelPrefetches(t *testing.T) {
	for _, ra := range []bool{false, true} {
		path, f := coldFile(t, 256)
		reg := NewRegistry()
		defer reg.Close()
		if _, err := reg.Add(refOf(t, 9, path)); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var issued uint64
		b := NewKernel(reg, Options{Readahead: ra, Issued: func(id uint32, first, n uint64) {
			mu.Lock()
			defer mu.Unlock()
			if id != 9 {
				t.Errorf("issued for file id %d, want 9", id)
			}
			issued += n
		}})
		if err := b.Submit(req(9, 16, 64)); err != nil {
			t.Fatal(err)
		}
		if err := b.Submit(&policies.Request{File: 9, Ranges: []policies.Range{{First: 100, N: 8}, {First: 200, N: 8}}}); err != nil {
			t.Fatal(err)
		}
		rep, err := b.Close()
		if err != nil || len(rep.Warnings) > 0 {
			t.Fatalf("close: %v %v", err, rep.Warnings)
		}
		checkSum(t, rep)
		if rep.Stats.PagesSubmitted != 80 || issued != 80 || rep.Stats.Requests != 2 {
			t.Fatalf("via %s: submitted %d, issued %d, requests %d; want 80, 80, 2", rep.Via, rep.Stats.PagesSubmitted, issued, rep.Stats.Requests)
		}
		// Three ranges, each acquired once (the file opened by the first);
		// the time on them covers the acquires.
		if rep.Acquires != 3 || rep.AcquireNS == 0 || rep.BusyNS < rep.AcquireNS {
			t.Errorf("via %s: %d acquires in %d ns, busy %d ns; want 3, in a part of the busy time", rep.Via, rep.Acquires, rep.AcquireNS, rep.BusyNS)
		}
		if rep.Opens != 1 || rep.OpenNS == 0 || rep.OpenNS > rep.AcquireNS {
			t.Errorf("via %s: %d opens in %d ns of %d ns acquiring; want 1, in a part of it", rep.Via, rep.Opens, rep.OpenNS, rep.AcquireNS)
		}
		// Each FADVISE's time from its request's Submit holds its time
		// from its own submission.
		if !ra && (rep.Advised == 0 || rep.PipelineNS < rep.AdviseNS) {
			t.Errorf("via %s: %d FADVISEs, %d ns from request to completion against %d ns from submission; want at least as long", rep.Via, rep.Advised, rep.PipelineNS, rep.AdviseNS)
		}
		// Resident now: FADVISE has completed, so the pages are in the
		// cache (in flight or read).
		for _, r := range [][2]uint64{{16, 64}, {100, 8}, {200, 8}} {
			if c := cached(t, f, r[0], r[1]); c != r[1] {
				t.Errorf("via %s: %d of pages %d+%d resident after the prefetch", rep.Via, c, r[0], r[1])
			}
		}
		if c := cached(t, f, 0, 16); c != 0 {
			t.Errorf("via %s: %d unrequested pages before the range resident", rep.Via, c)
		}
	}
}

// TestKernelSkipsCachedAndClips: cached pages are skipped and counted,
// pages past end of file are clipped and counted, unknown files rejected.
func TestKernelSkipsCachedAndClips(t *testing.T) {
	path, f := coldFile(t, 64)
	buf := make([]byte, 8*os.Getpagesize())
	if _, err := f.ReadAt(buf, 8*int64(os.Getpagesize())); err != nil { // pages 8..15 cached
		t.Fatal(err)
	}
	reg := NewRegistry()
	defer reg.Close()
	reg.Add(refOf(t, 1, path))
	b := NewKernel(reg, Options{})
	b.Submit(req(1, 0, 32))  // 8 cached, 24 submitted
	b.Submit(req(1, 60, 10)) // 4 submitted, 6 past EOF
	b.Submit(req(1, 80, 4))  // all past EOF
	b.Submit(req(2, 0, 4))   // unknown file
	rep, _ := b.Close()
	checkSum(t, rep)
	s := rep.Stats
	if s.PagesCached != 8 || s.PagesSubmitted != 28 || s.PagesPastEOF != 10 || s.Rejected != 1 || rep.PagesRefused != 4 {
		t.Fatalf("stats %+v, refused %d; want cached 8, submitted 28, past EOF 10, rejected 1 (4 pages refused)", s, rep.PagesRefused)
	}
}

// TestKernelBounds: requests past the in-flight or the queue bound are
// dropped and counted, never blocked on.
func TestKernelBounds(t *testing.T) {
	path, _ := coldFile(t, 64)
	reg := NewRegistry()
	defer reg.Close()
	reg.Add(refOf(t, 1, path))
	b := NewKernel(reg, Options{InFlight: 16})
	b.Submit(req(1, 0, 32)) // over the in-flight bound
	rep, _ := b.Close()
	if rep.Stats.Dropped != 1 || rep.Stats.Throttled != 1 || rep.PagesDropped != 32 {
		t.Fatalf("in-flight bound: %+v, dropped pages %d", rep.Stats, rep.PagesDropped)
	}
	checkSum(t, rep)

	b = NewKernel(reg, Options{Queue: 2})
	b.Submit(&policies.Request{File: 1, Ranges: []policies.Range{{First: 0, N: 1}, {First: 2, N: 1}, {First: 4, N: 1}}})
	rep, _ = b.Close()
	if rep.Stats.Dropped != 1 || rep.Stats.Throttled != 0 || rep.PagesDropped != 3 {
		t.Fatalf("queue bound: %+v, dropped pages %d", rep.Stats, rep.PagesDropped)
	}
	if err := b.Submit(req(1, 0, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v, want ErrClosed", err)
	}
}

// TestRegistryOpensOnDemand: Add opens nothing; the first request opens
// the file through the registry's opener, once.
func TestRegistryOpensOnDemand(t *testing.T) {
	path, _ := coldFile(t, 16)
	var opens []FileRef
	reg := NewRegistry(WithOpener(func(ref FileRef, flags int) (*os.File, error) {
		opens = append(opens, ref)
		return openPath(ref, flags)
	}))
	defer reg.Close()
	f, err := reg.Add(refOf(t, 3, path))
	if err != nil {
		t.Fatal(err)
	}
	if len(opens) != 0 || f.osFile() != nil {
		t.Fatalf("Add opened the file")
	}
	b := NewKernel(reg, Options{})
	b.Submit(req(3, 0, 4))
	b.Submit(req(3, 8, 4))
	rep, _ := b.Close()
	if len(opens) != 1 || opens[0].ID != 3 || rep.Stats.PagesSubmitted != 8 {
		t.Fatalf("opens %v, submitted %d; want one open of file id 3 and 8 pages", opens, rep.Stats.PagesSubmitted)
	}
	for _, bad := range []FileRef{{ID: 4, Ino: 0, Path: path}, {ID: 5, Ino: 7, Path: "relative/path"}, {ID: 3, Ino: 7, Path: path}} {
		if _, err := reg.Add(bad); err == nil {
			t.Errorf("Add(%+v) accepted", bad)
		}
	}
}

// TestRegistryRefusesChangedFiles: a path replaced by another file, or by
// a symlink (even to the registered file), is never read: before the
// first open (the open file's dev/ino differ, or O_NOFOLLOW refuses) and
// after it (the lstat re-check before each prefetch).
func TestRegistryRefusesChangedFiles(t *testing.T) {
	type change func(t *testing.T, path, other string)
	replace := func(t *testing.T, path, other string) {
		if err := os.Rename(other, path); err != nil {
			t.Fatal(err)
		}
	}
	symlinkSame := func(t *testing.T, path, other string) {
		keep := path + ".orig"
		if err := os.Rename(path, keep); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(keep, path); err != nil {
			t.Fatal(err)
		}
	}
	symlinkOther := func(t *testing.T, path, other string) {
		os.Remove(path)
		if err := os.Symlink(other, path); err != nil {
			t.Fatal(err)
		}
	}
	for name, ch := range map[string]change{"replaced": replace, "symlink to itself": symlinkSame, "symlink to another": symlinkOther} {
		for _, opened := range []bool{false, true} {
			t.Run(name+map[bool]string{false: " before open", true: " after open"}[opened], func(t *testing.T) {
				dir := scratchDir(t)
				path := writeFile(t, dir, "a", 32)
				other := writeFile(t, dir, "b", 32)
				of, err := os.Open(other)
				if err != nil {
					t.Fatal(err)
				}
				defer of.Close()
				of.Sync()
				evictFile(t, of)
				reg := NewRegistry()
				defer reg.Close()
				reg.Add(refOf(t, 1, path))
				b := NewKernel(reg, Options{})
				if opened {
					b.Submit(req(1, 0, 1))
					// Wait for the open: a Close of a second backend
					// would do, but a sync request is simpler.
					b.Close()
					b = NewKernel(reg, Options{})
				}
				ch(t, path, other)
				b.Submit(req(1, 8, 16))
				rep, _ := b.Close()
				checkSum(t, rep)
				if rep.Stats.PagesSubmitted != 0 || rep.PagesRefused != 16 {
					t.Fatalf("submitted %d, refused %d; want 0 and 16: %v", rep.Stats.PagesSubmitted, rep.PagesRefused, rep.Warnings)
				}
				if len(rep.Warnings) == 0 || !strings.Contains(rep.Warnings[0], "changed") {
					t.Errorf("warnings %q do not say the file changed", rep.Warnings)
				}
				if c := cached(t, of, 0, 32); c != 0 {
					t.Fatalf("%d pages of the other file were read", c)
				}
				if f := reg.Lookup(1); !errors.Is(f.Err(), ErrChanged) {
					t.Fatalf("file error %v, want ErrChanged", f.Err())
				}
			})
		}
	}
}

// TestRegistryRemove: a removed file is refused; its descriptor closes.
func TestRegistryRemove(t *testing.T) {
	path, _ := coldFile(t, 16)
	reg := NewRegistry()
	f, _ := reg.Add(refOf(t, 1, path))
	b := NewKernel(reg, Options{})
	b.Submit(req(1, 0, 2))
	b.Close()
	if f.osFile() == nil {
		t.Fatal("file not open after a prefetch")
	}
	if err := reg.Remove(1); err != nil {
		t.Fatal(err)
	}
	if f.osFile() != nil {
		t.Fatal("removed file still open")
	}
	if err := reg.Remove(1); !errors.Is(err, ErrUnknownFile) {
		t.Fatalf("second remove: %v", err)
	}
	b = NewKernel(reg, Options{})
	b.Submit(req(1, 0, 2))
	rep, _ := b.Close()
	if rep.Stats.Rejected != 1 || rep.Stats.PagesSubmitted != 0 {
		t.Fatalf("after remove: %+v", rep.Stats)
	}
	reg.Close()
	if _, err := reg.Add(refOf(t, 2, path)); !errors.Is(err, ErrClosed) {
		t.Fatalf("add after close: %v", err)
	}
}

// TestRetiredWhileQueued: a request whose file is unregistered (the
// program done with it) while the request waits in the queue is stale:
// counted, not read, and no warning (a replay's oracle runs ahead of a
// lagging backend).
func TestRetiredWhileQueued(t *testing.T) {
	p1, _ := coldFile(t, 8)
	p2, _ := coldFile(t, 8)
	reg := NewRegistry()
	defer reg.Close()
	reg.Add(refOf(t, 1, p1))
	reg.Add(refOf(t, 2, p2))
	hold, held := make(chan struct{}), make(chan struct{})
	b := NewKernel(reg, Options{Issued: func(file uint32, _, _ uint64) {
		if file == 2 {
			close(held)
			<-hold
		}
	}})
	b.Submit(req(2, 0, 1)) // the service waits in Issued
	<-held
	b.Submit(req(1, 0, 4))
	if err := reg.Remove(1); err != nil {
		t.Fatal(err)
	}
	close(hold)
	rep, _ := b.Close()
	checkSum(t, rep)
	if rep.PagesStale != 4 || rep.PagesRefused != 0 || len(rep.Warnings) != 0 || rep.Stats.PagesSubmitted != 1 {
		t.Errorf("stale %d, refused %d, submitted %d, warnings %q; want 4 stale, none refused, 1 submitted, no warning",
			rep.PagesStale, rep.PagesRefused, rep.Stats.PagesSubmitted, rep.Warnings)
	}
}

// fakeCache records the direct backend's fills.
type fakeCache struct {
	mu      sync.Mutex
	present map[uint64]bool
	full    uint64 // Reserve answers Full from this page on
	slots   []uint64
	data    map[uint64][]byte
	errs    int
}

func (c *fakeCache) Reserve(file uint32, page uint64) (int32, Reservation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.present[page] {
		return -1, Present
	}
	if page >= c.full {
		return -1, Full
	}
	c.slots = append(c.slots, page)
	return int32(len(c.slots) - 1), Reserved
}

func (c *fakeCache) Fill(slot int32, data []byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errs++
		return
	}
	c.data[c.slots[slot]] = bytes.Clone(data)
}

// TestDirectFillsCache: the direct backend reads each reserved page with
// O_DIRECT into the cache, skips present pages and drops the rest of a
// range at the first full answer.
func TestDirectFillsCache(t *testing.T) {
	dir := scratchDir(t)
	ps := os.Getpagesize()
	path := filepath.Join(dir, "d")
	testenv.WritePattern(t, path, 40*ps+100) // a short last page
	reg := NewRegistry()
	defer reg.Close()
	reg.Add(refOf(t, 5, path))
	c := &fakeCache{present: map[uint64]bool{3: true}, full: 30, data: map[uint64][]byte{}}
	d, err := NewDirect(reg, c, DirectOptions{QueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	d.Submit(req(5, 0, 8))   // 7 read, page 3 present
	d.Submit(req(5, 28, 6))  // 28, 29 read, 30..33 dropped
	d.Submit(req(5, 40, 10)) // page 40 (the short last page) full, 9 past EOF
	rep, err := d.Close()
	if err != nil {
		t.Fatal(err)
	}
	checkSum(t, rep)
	s := rep.Stats
	if s.PagesSubmitted != 9 || s.PagesCached != 1 || s.PagesPastEOF != 9 || rep.PagesDropped != 5 || c.errs != 0 {
		t.Fatalf("stats %+v, dropped %d, errors %d", s, rep.PagesDropped, c.errs)
	}
	for page, b := range c.data {
		for i, v := range b {
			if want := testenv.Pattern(int64(page)*int64(ps) + int64(i)); v != want {
				t.Fatalf("page %d byte %d = %d, want %d", page, i, v, want)
			}
		}
	}
	if len(c.data) != 9 {
		t.Fatalf("%d pages filled, want 9", len(c.data))
	}
	// A file changed under the direct backend is refused at the re-check.
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	testenv.WritePattern(t, path, 40*ps)
	d, err = NewDirect(reg, c, DirectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Submit(req(5, 10, 2))
	rep, _ = d.Close()
	if rep.PagesRefused != 2 || rep.Stats.PagesSubmitted != 0 {
		t.Fatalf("changed file: %+v refused %d", rep.Stats, rep.PagesRefused)
	}
}

// TestNew names every backend and refuses unknown ones.
func TestNew(t *testing.T) {
	reg := NewRegistry()
	defer reg.Close()
	for _, name := range []string{NameKernel, NameNone} {
		b, err := New(name, reg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		b.Submit(req(1, 0, 3))
		rep, err := b.Close()
		if err != nil || rep.Stats.Requests != 1 || rep.Stats.PagesRequested != 3 || rep.Via == "" {
			t.Fatalf("%s: %+v %v", name, rep, err)
		}
	}
	for _, name := range []string{NameDirect, "bogus"} {
		if _, err := New(name, reg, Options{}); err == nil {
			t.Errorf("New(%q) accepted", name)
		}
	}
	if _, err := os.Stat("/dev/predictio"); err != nil {
		if _, err := New(NameKmod, reg, Options{}); err == nil {
			t.Errorf("kmod without the module accepted")
		}
		if err := KmodAvailable(); err == nil {
			t.Errorf("KmodAvailable without the module")
		}
	}
}
