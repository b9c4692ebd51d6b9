package policies

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file validates the readahead model against the running kernel's
// decisions, captured with the readahead tracepoints in a tracefs
// instance of our own, filtered by the test file's inode.

const tracefsRoot = "/sys/kernel/tracing"

// mmapSink keeps the mmap scan's loads alive.
var mmapSink byte

// kernelRA is one decision, as the kernel reports it or as the model makes
// it.
type kernelRA struct {
	kind       RAKind
	index, req uint64
	window     bool
	start      uint64
	size       uint64
	async      uint64
}

func (d kernelRA) String() string {
	s := fmt.Sprintf("%s index=%d req=%d", d.kind, d.index, d.req)
	if d.window {
		s += fmt.Sprintf(" -> window start=%d size=%d async=%d", d.start, d.size, d.async)
	}
	return s
}

func modelRA(d *RADecision) kernelRA {
	k := kernelRA{kind: d.Kind, index: d.Index, req: d.ReqCount, window: d.Window}
	if d.Window {
		k.start, k.size, k.async = d.After.Start, d.After.Size, d.After.AsyncSize
	}
	if d.Kind == RAMmap { // no trigger tracepoint: only the window is seen
		k.index, k.req = 0, 0
	}
	return k
}

// traceEvent is one parsed line of a tracefs trace file.
type traceEvent struct {
	name   string
	fields map[string]string
}

func (e traceEvent) u64(t *testing.T, key string) uint64 {
	v, ok := e.fields[key]
	if !ok {
		t.Fatalf("trace event %s: no field %q in %v", e.name, key, e.fields)
	}
	base := 10
	if key == "ino" {
		base = 16
	}
	n, err := strconv.ParseUint(v, base, 64)
	if err != nil {
		t.Fatalf("trace event %s: field %s=%q: %v", e.name, key, v, err)
	}
	return n
}

// ofs parses "ofs=A" or "ofs=A-B" (bytes) into pages [first, last].
func (e traceEvent) ofs(t *testing.T) (first, last uint64) {
	v := e.fields["ofs"]
	a, b, ranged := strings.Cut(v, "-")
	x, err := strconv.ParseUint(a, 10, 64)
	if err != nil {
		t.Fatalf("trace event %s: ofs=%q: %v", e.name, v, err)
	}
	first, last = x/4096, x/4096
	if ranged {
		y, err := strconv.ParseUint(b, 10, 64)
		if err != nil {
			t.Fatalf("trace event %s: ofs=%q: %v", e.name, v, err)
		}
		last = y / 4096
	}
	return first, last
}

func parseTrace(data []byte) []traceEvent {
	var evs []traceEvent
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, name := range []string{"page_cache_sync_ra", "page_cache_async_ra", "page_cache_ra_order", "mm_filemap_fault", "mm_filemap_map_pages", "mm_filemap_delete_from_page_cache", "mm_filemap_get_pages"} {
			i := strings.Index(line, " "+name+": ")
			if i < 0 {
				continue
			}
			ev := traceEvent{name: name, fields: map[string]string{}}
			for _, tok := range strings.Fields(line[i+len(name)+3:]) {
				if k, v, ok := strings.Cut(tok, "="); ok {
					ev.fields[k] = v
				}
			}
			evs = append(evs, ev)
			break
		}
	}
	return evs
}

// kernelDecisions turns readahead events into decisions: a sync/async
// trigger, followed by the page_cache_ra_order window it chose if any; a
// window without a trigger is an mmap read-around.
func kernelDecisions(t *testing.T, evs []traceEvent) []kernelRA {
	var out []kernelRA
	open := -1
	for _, e := range evs {
		switch e.name {
		case "page_cache_sync_ra", "page_cache_async_ra":
			k := RASync
			if e.name == "page_cache_async_ra" {
				k = RAAsync
			}
			out = append(out, kernelRA{kind: k, index: e.u64(t, "index"), req: e.u64(t, "req_count")})
			open = len(out) - 1
		case "page_cache_ra_order":
			if open < 0 {
				out = append(out, kernelRA{kind: RAMmap})
				open = len(out) - 1
			}
			d := &out[open]
			d.window, d.start, d.size, d.async = true, e.u64(t, "index"), e.u64(t, "size"), e.u64(t, "async_size")
			open = -1
		default:
			open = -1
		}
	}
	return out
}

// matchDecisions aligns two decision sequences and returns the matches.
func matchDecisions(kern, model []kernelRA) (matched int, diffs []string) {
	i, j := 0, 0
	for i < len(kern) && j < len(model) {
		if kern[i] == model[j] {
			matched++
			i++
			j++
			continue
		}
		diffs = append(diffs, fmt.Sprintf("#%d kernel %v | model %v", i, kern[i], model[j]))
		// Resynchronise on the next decision both agree on.
		found := false
		for d := 1; d <= 8 && !found; d++ {
			if j+d < len(model) && kern[i] == model[j+d] {
				j += d
				found = true
			} else if i+d < len(kern) && kern[i+d] == model[j] {
				i += d
				found = true
			}
		}
		if !found {
			i++
			j++
		}
	}
	for ; i < len(kern); i++ {
		diffs = append(diffs, fmt.Sprintf("#%d kernel %v | model -", i, kern[i]))
	}
	for ; j < len(model); j++ {
		diffs = append(diffs, fmt.Sprintf("model #%d %v | kernel -", j, model[j]))
	}
	return matched, diffs
}

type traceInstance struct {
	t   *testing.T
	dir string
}

var raEvents = []string{
	"filemap/mm_filemap_delete_from_page_cache",
	"readahead/page_cache_sync_ra",
	"readahead/page_cache_async_ra",
	"readahead/page_cache_ra_order",
	"filemap/mm_filemap_fault",
	"filemap/mm_filemap_map_pages",
	"filemap/mm_filemap_get_pages",
}

func newTraceInstance(t *testing.T) *traceInstance {
	if os.Geteuid() != 0 {
		t.Skip("readahead validation needs root (CAP_SYS_ADMIN) for tracefs")
	}
	if _, err := os.Stat(filepath.Join(tracefsRoot, "instances")); err != nil {
		if err := unix.Mount("nodev", tracefsRoot, "tracefs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			t.Skipf("readahead validation needs tracefs at %s: mount: %v", tracefsRoot, err)
		}
	}
	for _, ev := range raEvents {
		if _, err := os.Stat(filepath.Join(tracefsRoot, "events", ev, "format")); err != nil {
			t.Skipf("kernel lacks tracepoint %s: %v", ev, err)
		}
	}
	// The fields the parser relies on must be in the format.
	for ev, fields := range map[string][]string{
		"readahead/page_cache_sync_ra":  {"i_ino", "index", "req_count", "size", "async_size", "ra_pages"},
		"readahead/page_cache_ra_order": {"i_ino", "index", "size", "async_size"},
		"filemap/mm_filemap_fault":      {"i_ino", "index"},
		"filemap/mm_filemap_map_pages":  {"i_ino", "index", "last_index"},
	} {
		b, err := os.ReadFile(filepath.Join(tracefsRoot, "events", ev, "format"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fields {
			if !bytes.Contains(b, []byte(" "+f+";")) {
				t.Fatalf("tracepoint %s has no field %s; format:\n%s", ev, f, b)
			}
		}
	}
	dir := filepath.Join(tracefsRoot, "instances", fmt.Sprintf("predictio-ra-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		t.Fatalf("create tracefs instance: %v", err)
	}
	ti := &traceInstance{t: t, dir: dir}
	t.Cleanup(func() {
		ti.enable(false)
		os.Remove(dir)
	})
	ti.write("buffer_size_kb", "8192")
	return ti
}

func (ti *traceInstance) write(rel, v string) {
	if err := os.WriteFile(filepath.Join(ti.dir, rel), []byte(v), 0); err != nil {
		ti.t.Fatalf("write %s: %v", rel, err)
	}
}

func (ti *traceInstance) enable(on bool) {
	v := "0"
	if on {
		v = "1"
	}
	for _, ev := range raEvents {
		os.WriteFile(filepath.Join(ti.dir, "events", ev, "enable"), []byte(v), 0)
	}
}

// capture runs fn with the events enabled for inode ino of device dev
// (stat's st_dev) and returns what they logged.
func (ti *traceInstance) capture(dev, ino uint64, fn func()) []traceEvent {
	ti.write("trace", "")
	kdev := uint64(unix.Major(dev))<<20 | uint64(unix.Minor(dev)) // the kernel's s_dev encoding
	for _, ev := range raEvents {
		ti.write(filepath.Join("events", ev, "filter"), fmt.Sprintf("i_ino == %d && s_dev == %d", ino, kdev))
	}
	ti.enable(true)
	fn()
	ti.enable(false)
	b, err := os.ReadFile(filepath.Join(ti.dir, "trace"))
	if err != nil {
		ti.t.Fatal(err)
	}
	if bytes.Contains(b, []byte("LOST")) {
		ti.t.Fatalf("trace buffer lost events")
	}
	return parseTrace(b)
}

// evict drops path from the page cache and verifies with cachestat(2)
// that none of it is cached.
func evict(t *testing.T, f *os.File) {
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			t.Skip("kernel lacks cachestat(2) (Linux 6.5), needed to verify a cold cache")
		}
		t.Fatal(err)
	}
	if cs.Cache != 0 {
		t.Fatalf("file not cold after POSIX_FADV_DONTNEED: %d pages cached", cs.Cache)
	}
}

// bdiPages returns read_ahead_kb and max_sectors_kb of the device holding
// f, in pages.
// fileGeometry is what the readahead model needs to know of a file.
type fileGeometry struct {
	st               syscall.Stat_t
	raPages, ioPages uint64 // the device's read_ahead_kb and max I/O, in pages
	fsType           int64
	small            bool // the filesystem caches order-0 folios only
}

// geometry returns f's fileGeometry, skipping the test where the device's
// read_ahead_kb cannot be read.
func geometry(t *testing.T, f *os.File) fileGeometry {
	t.Helper()
	var g fileGeometry
	if err := syscall.Fstat(int(f.Fd()), &g.st); err != nil {
		t.Fatal(err)
	}
	g.raPages, g.ioPages = bdiPages(t, f)
	if g.raPages == 0 {
		t.Skip("cannot read the device's read_ahead_kb from /sys/class/bdi")
	}
	// ext4 and XFS use large folios in the page cache since Linux 6.16
	// (XFS earlier); other filesystems get the order-0 model.
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		t.Fatal(err)
	}
	g.fsType = int64(sfs.Type)
	g.small = sfs.Type != unix.EXT4_SUPER_MAGIC && sfs.Type != unix.XFS_SUPER_MAGIC
	return g
}

func bdiPages(t *testing.T, f *os.File) (ra, io uint64) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	read := func(p string) uint64 {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return n / 4
	}
	ra = read("/sys/class/bdi/" + dev + "/read_ahead_kb")
	io = read("/sys/dev/block/" + dev + "/queue/max_sectors_kb")
	if io == 0 {
		io = read("/sys/dev/block/" + dev + "/../queue/max_sectors_kb")
	}
	return ra, io
}

func TestReadaheadMatchesKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 64 MiB cold several times")
	}
	ti := newTraceInstance(t)
	dir, err := os.MkdirTemp("/var/tmp", "predictio-ra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// On the machine's own device, with its read_ahead_kb.
	raScenarios(t, ti, dir)
	// On an ext4 loop device of our own set to the kernel's default
	// read_ahead_kb of 128, so the default model is validated too
	// without touching the shared device's setting.
	t.Run("loop-ext4-128k", func(t *testing.T) {
		raScenarios(t, ti, loopExt4(t, 128))
	})
}

// loopExt4 makes a 128 MiB ext4 filesystem on a loop device with the given
// read_ahead_kb, mounts it under /var/tmp and returns the mount point.
func loopExt4(t *testing.T, raKB int) string {
	dir, err := os.MkdirTemp("/var/tmp", "predictio-raloop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 128<<20); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Skipf("loop device ext4 unavailable: %s %v: %v: %s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("mkfs.ext4", "-q", "-F", img)
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Skipf("loop device ext4 unavailable: mount %s: %v", dev, err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, 0) })
	ra := filepath.Join("/sys/block", filepath.Base(dev), "queue/read_ahead_kb")
	if err := os.WriteFile(ra, []byte(strconv.Itoa(raKB)), 0); err != nil {
		t.Fatalf("set %s: %v", ra, err)
	}
	return mnt
}

// raScenarios runs the read and mmap scenarios on a 64 MiB file in dir.
func raScenarios(t *testing.T, ti *traceInstance, dir string) {
	const size = 64 << 20
	const pages = size / 4096
	path := filepath.Join(dir, "data")
	f, err := os.Create(path)
	if err == nil {
		t.Cleanup(func() { f.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte("predictio readahead validation\n"), 1<<15)
	for n := 0; n < size; n += len(buf) {
		if _, err := f.Write(buf[:min(len(buf), size-n)]); err != nil {
			t.Fatal(err)
		}
	}
	geo := geometry(t, f)
	st, raPages, ioPages, small := geo.st, geo.raPages, geo.ioPages, geo.small
	if os.Getenv("PREDICTIO_RA_SMALL_FOLIOS") != "" {
		small = true // diagnostic: how much the large-folio model matters
	}
	t.Logf("file %s ino %d: %d pages; bdi ra_pages %d io_pages %d; fs magic %#x, small folios %v", path, st.Ino, pages, raPages, ioPages, geo.fsType, small)

	type scenario struct {
		name  string
		exact bool // the model is meant to be exact here
		run   func(t *testing.T, g *os.File, m *Readahead)
	}
	readLoop := func(chunk, stride int64) func(t *testing.T, g *os.File, m *Readahead) {
		return func(t *testing.T, g *os.File, m *Readahead) {
			b := make([]byte, chunk)
			for off := int64(0); off+chunk <= size; off += stride {
				if _, err := g.ReadAt(b, off); err != nil {
					t.Fatal(err)
				}
				m.Read(1, uint64(off/4096), uint64((chunk+4095)/4096), func(*Request) {})
			}
		}
	}
	// readAt reads chunk bytes at each offset in turn.
	readAt := func(chunk int64, offs []int64) func(t *testing.T, g *os.File, m *Readahead) {
		return func(t *testing.T, g *os.File, m *Readahead) {
			b := make([]byte, chunk)
			for _, off := range offs {
				if _, err := g.ReadAt(b, off); err != nil {
					t.Fatal(err)
				}
				m.Read(1, uint64(off/4096), uint64((chunk+4095)/4096), func(*Request) {})
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var random4k, random64k, interleaved, backward []int64
	for range 2000 {
		random4k = append(random4k, rng.Int64N(pages)*4096)
	}
	for range 500 {
		random64k = append(random64k, rng.Int64N(pages-16)*4096)
	}
	for i := int64(0); i < 4096; i++ {
		interleaved = append(interleaved, i*4096, size/2+i*4096)
	}
	for i := int64(1024); i > 0; i-- {
		backward = append(backward, size-i*4096*0-(1025-i)*4096)
	}
	scenarios := []scenario{
		{"sequential-4k", true, readLoop(4096, 4096)},
		{"sequential-128k", true, readLoop(128<<10, 128<<10)},
		{"sequential-4k-fadvise-sequential", true, readLoop(4096, 4096)},
		{"sequential-16m", true, readLoop(16<<20, 16<<20)},
		{"strided-4k-every-16", true, readLoop(4096, 16*4096)},
		{"strided-4k-every-2", true, readLoop(4096, 2*4096)},
		{"random-4k", true, readAt(4096, random4k)},
		{"random-64k", true, readAt(64<<10, random64k)},
		{"interleaved-2-streams", true, readAt(4096, interleaved)},
		{"backward-4k", true, readAt(4096, backward)},
		{"mmap-scan", false, nil},
		{"mmap-random", false, nil},
	}
	total, matchedAll := 0, 0
	lookupTotal, lookupMatched := 0, 0
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var (
				g         *os.File
				evs       []traceEvent
				model     []kernelRA
				m         *Readahead
				ra        uint64
				disturbed bool
			)
			// Another process dropping caches (or memory pressure) during
			// a run would evict pages behind the model's back: detect it
			// and retry.
			for attempt := 1; ; attempt++ {
				if g != nil {
					g.Close()
				}
				var err error
				g, err = os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				evict(t, f)
				model = nil
				ra = raPages
				if strings.Contains(sc.name, "fadvise-sequential") {
					// POSIX_FADV_SEQUENTIAL doubles the file's ra_pages.
					if err := unix.Fadvise(int(g.Fd()), 0, 0, unix.FADV_SEQUENTIAL); err != nil {
						t.Fatal(err)
					}
					ra *= 2
				}
				m = NewReadahead(ReadaheadConfig{
					RAPages:     ra,
					IOPages:     ioPages,
					SmallFolios: small,
					FilePages:   func(uint32) uint64 { return pages },
					OnDecision:  func(d *RADecision) { model = append(model, modelRA(d)) },
				})
				if sc.run != nil {
					evs = ti.capture(uint64(st.Dev), st.Ino, func() { sc.run(t, g, m) })
				} else {
					evs = ti.capture(uint64(st.Dev), st.Ino, func() {
						mem, err := unix.Mmap(int(g.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
						if err != nil {
							t.Fatal(err)
						}
						var sum byte
						if sc.name == "mmap-scan" {
							for off := 0; off < size; off += 4096 {
								sum += mem[off]
							}
						} else {
							for _, off := range random4k {
								sum += mem[off]
							}
						}
						unix.Munmap(mem)
						mmapSink = sum
					})
					// Feed the model the faults and fault-around mappings the
					// kernel observed, in order.
					for _, e := range evs {
						switch e.name {
						case "mm_filemap_fault":
							first, _ := e.ofs(t)
							m.Fault(1, first, func(*Request) {})
						case "mm_filemap_map_pages":
							first, last := e.ofs(t)
							m.MapPages(1, first, last-first+1)
						}
					}
				}
				evicted := 0
				for _, e := range evs {
					if e.name == "mm_filemap_delete_from_page_cache" {
						evicted++
					}
				}
				if evicted == 0 {
					break
				}
				if attempt == 3 {
					disturbed = true
					t.Logf("pages were evicted by someone else in all %d attempts; not asserting", attempt)
					break
				}
				t.Logf("attempt %d: %d pages of the file were evicted by someone else during the run; retrying", attempt, evicted)
			}
			defer g.Close()
			for _, e := range evs {
				if e.name == "page_cache_sync_ra" && e.u64(t, "ra_pages") != ra {
					t.Fatalf("kernel ra_pages %d, model has %d", e.u64(t, "ra_pages"), ra)
				}
			}
			// Compare the final page-cache contents with the model's.
			mem, err := unix.Mmap(int(g.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			vec := make([]byte, pages)
			if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
				t.Fatal(e)
			}
			unix.Munmap(mem)
			f1 := m.file(1)
			var kOnly, mOnly, both int
			var firstDiff []string
			for p := range uint64(pages) {
				k, mo := vec[p]&1 != 0, f1.pages.get(p)&raPresent != 0
				switch {
				case k && mo:
					both++
				case k:
					kOnly++
				case mo:
					mOnly++
				}
				if k != mo && len(firstDiff) < 8 {
					firstDiff = append(firstDiff, fmt.Sprintf("page %d kernel=%v model=%v", p, k, mo))
				}
			}
			t.Logf("residency: both %d, kernel only %d, model only %d %v", both, kOnly, mOnly, firstDiff)
			counts := map[string]int{}
			for _, e := range evs {
				counts[e.name]++
			}
			t.Logf("events: %v", counts)
			kern := kernelDecisions(t, evs)
			if sc.run != nil {
				// The recorder sees reads as mm_filemap_get_pages lookups,
				// several per large read call: how does a model fed those
				// compare?
				var viaLookups []kernelRA
				m2 := NewReadahead(ReadaheadConfig{RAPages: ra, IOPages: ioPages, SmallFolios: small,
					FilePages:  func(uint32) uint64 { return pages },
					OnDecision: func(d *RADecision) { viaLookups = append(viaLookups, modelRA(d)) }})
				lookups := 0
				for _, e := range evs {
					if e.name == "mm_filemap_get_pages" {
						first, last := e.ofs(t)
						if os.Getenv("PREDICTIO_RA_DUMP") != "" && lookups < 30 {
							t.Logf("lookup [%d, %d]", first, last)
						}
						m2.Read(1, first, last-first+1, func(*Request) {})
						lookups++
					}
				}
				matched2, diffs2 := matchDecisions(kern, viaLookups)
				if os.Getenv("PREDICTIO_RA_DUMP") != "" {
					for i, d := range diffs2 {
						if i < 10 {
							t.Logf("lookup diff %s", d)
						}
					}
				}
				rate2 := float64(matched2) / float64(max(len(kern), len(viaLookups), 1))
				lookupTotal += max(len(kern), len(viaLookups))
				lookupMatched += matched2
				t.Logf("%s fed the %d recorded read lookups instead of the read calls: %d decisions, matched %d: match rate %.3f", sc.name, lookups, len(viaLookups), matched2, rate2)
				// Not asserted: mm_filemap_get_pages is only hit on the
				// lookup's success path, and a lookup that waited for a
				// folio still under readahead I/O returns without it, so
				// which lookups are recorded depends on I/O timing.
			}
			matched, diffs := matchDecisions(kern, model)
			den := max(len(kern), len(model))
			rate := 1.0
			if den > 0 {
				rate = float64(matched) / float64(den)
			}
			total += den
			matchedAll += matched
			t.Logf("%s: kernel %d decisions, model %d, matched %d: match rate %.3f", sc.name, len(kern), len(model), matched, rate)
			for i, d := range diffs {
				if i == 10 {
					t.Logf("... %d more differences", len(diffs)-10)
					break
				}
				t.Logf("  diff %s", d)
			}
			if os.Getenv("PREDICTIO_RA_DUMP") != "" {
				for i := 0; i < max(len(kern), len(model)) && i < 30; i++ {
					var a, b kernelRA
					if i < len(kern) {
						a = kern[i]
					}
					if i < len(model) {
						b = model[i]
					}
					t.Logf("%3d kernel %-70v model %v", i, a, b)
				}
			}
			if len(kern) == 0 {
				t.Fatalf("no readahead events captured")
			}
			if sc.exact && !disturbed && rate < 0.95 {
				t.Errorf("match rate %.3f below 0.95 where the model is meant to be exact", rate)
			}
		})
	}
	t.Logf("overall: %d of %d decisions matched (%.3f)", matchedAll, total, float64(matchedAll)/float64(max(total, 1)))
	t.Logf("read scenarios fed recorded lookups: %d of %d decisions matched (%.3f)", lookupMatched, lookupTotal, float64(lookupMatched)/float64(max(lookupTotal, 1)))
}

// TestReadaheadMmapMissMatchesKernel checks mmap read-around and its
// MMAP_LOTSAMISS cut-off: random touches of a sparse 1 GiB file miss often
// enough that mmap_miss passes 100 and the kernel stops reading around.
func TestReadaheadMmapMissMatchesKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("touches a 64 GiB sparse mapping")
	}
	ti := newTraceInstance(t)
	dir, err := os.MkdirTemp("/var/tmp", "predictio-ra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const size = 64 << 30
	const pages = size / 4096
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil { // holes read as zeroes, through readahead
		t.Fatal(err)
	}
	geo := geometry(t, f)
	st, raPages, ioPages, small := geo.st, geo.raPages, geo.ioPages, geo.small
	rng := rand.New(rand.NewPCG(5, 6))
	var touches []int64
	for range 150 { // each miss reads ra_pages (8 MiB here) of zeroes
		touches = append(touches, rng.Int64N(pages)*4096)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		evict(t, f)
		var model []kernelRA
		m := NewReadahead(ReadaheadConfig{RAPages: raPages, IOPages: ioPages, SmallFolios: small,
			FilePages:  func(uint32) uint64 { return pages },
			OnDecision: func(d *RADecision) { model = append(model, modelRA(d)) }})
		evs := ti.capture(uint64(st.Dev), st.Ino, func() {
			mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			var sum byte
			for _, off := range touches {
				sum += mem[off]
			}
			unix.Munmap(mem)
			mmapSink = sum
		})
		faults, evicted := 0, 0
		if os.Getenv("PREDICTIO_RA_DUMP") != "" {
			for i, e := range evs {
				if i < 12 {
					t.Logf("event %s %v", e.name, e.fields)
				}
			}
		}
		for _, e := range evs {
			switch e.name {
			case "mm_filemap_fault":
				first, _ := e.ofs(t)
				m.Fault(1, first, func(*Request) {})
				faults++
			case "mm_filemap_map_pages":
				first, last := e.ofs(t)
				m.MapPages(1, first, last-first+1)
			case "mm_filemap_delete_from_page_cache":
				evicted++
			}
		}
		if evicted > 0 && attempt < 3 {
			t.Logf("attempt %d: %d pages evicted by someone else; retrying", attempt, evicted)
			continue
		}
		kern := kernelDecisions(t, evs)
		matched, diffs := matchDecisions(kern, model)
		rate := float64(matched) / float64(max(len(kern), len(model), 1))
		t.Logf("mmap-random-64g: %d faults, final mmap_miss %d; kernel %d decisions, model %d, matched %d: match rate %.3f",
			faults, m.State(1).MmapMiss, len(kern), len(model), matched, rate)
		for i, d := range diffs {
			if i == 10 {
				break
			}
			t.Logf("  diff %s", d)
		}
		// With fault-around, a fault that read around is retried after
		// the I/O and the retry's fault-around maps cached pages, which
		// lowers mmap_miss again: on Linux 6.18 random touches keep it
		// near 0 and MMAP_LOTSAMISS is not reached. The model must agree
		// on that too.
		if kernMiss := lastMmapMiss(t, evs); kernMiss >= 0 {
			t.Logf("mmap_miss at the last trigger: kernel %d", kernMiss)
		}
		if evicted == 0 && rate < 0.8 {
			t.Errorf("match rate %.3f below 0.8", rate)
		}
		return
	}
}

// lastMmapMiss returns the mmap_miss of the last sync/async trigger event,
// or -1.
func lastMmapMiss(t *testing.T, evs []traceEvent) int64 {
	v := int64(-1)
	for _, e := range evs {
		if e.name == "page_cache_sync_ra" || e.name == "page_cache_async_ra" {
			v = int64(e.u64(t, "mmap_miss"))
		}
	}
	return v
}
