package record

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/bpf"
	"github.com/predictio/predictio/formats"
)

// fileKey identifies a file the way tracepoints do: s_dev and inode.
type fileKey struct {
	dev uint32
	ino uint64
}

// File states.
const (
	stateUnknown uint32 = iota // path not resolved yet: events are kept
	stateAllowed
	stateDenied // excluded by a filter: events are dropped (and denied in the kernel)
)

type fileEntry struct {
	id    uint32
	key   fileKey
	state atomic.Uint32
	path  string // guarded by fileTable.mu
	// pages is the file's size in pages when last stat'ed (0: unknown),
	// statAt when (monotonic ns); used by the writer only.
	pages  uint64
	statAt uint64
}

// setSize records st's size in pages.
func (e *fileEntry) setSize(st *unix.Stat_t, now uint64) {
	e.pages = (uint64(st.Size) + 4095) / 4096
	e.statAt = now
}

// filter holds the path and size filters.
type filter struct {
	include []string
	exclude []string
	minSize uint64
}

// defaultExcludes are excluded unless --include names them.
var defaultExcludes = []string{"/proc", "/sys", "/dev"}

func hasPathPrefix(path, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return true
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// decide returns the state for a resolved file.
func (f *filter) decide(path string, st *unix.Stat_t) uint32 {
	if st != nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return stateDenied
	}
	for _, p := range f.exclude {
		if hasPathPrefix(path, p) {
			return stateDenied
		}
	}
	if len(f.include) > 0 {
		ok := false
		for _, p := range f.include {
			if hasPathPrefix(path, p) {
				ok = true
				break
			}
		}
		if !ok {
			return stateDenied
		}
	}
	if f.minSize > 0 && st != nil && uint64(st.Size) < f.minSize {
		return stateDenied
	}
	return stateAllowed
}

// unknownState is the state of a file whose path could not be found.
func (f *filter) unknownState() uint32 {
	if len(f.include) > 0 || f.minSize > 0 {
		return stateDenied
	}
	return stateUnknown
}

// fileTable assigns file ids and resolves (dev, ino) to paths. It is shared
// by the event writer, the opens reader and the hint server.
type fileTable struct {
	mu          sync.Mutex
	byKey       map[fileKey]*fileEntry
	list        []*fileEntry
	cands       map[fileKey]string // paths seen in opens and hints
	filt        filter
	deny        *ebpf.Map      // bpf "files" map; nil in tests
	denyActive  *ebpf.Variable // bpf deny_active; nil in tests
	denyOn      atomic.Bool
	fallbackDir string
	interps     map[string]string // executable -> ELF interpreter
}

func newFileTable(filt filter, deny *ebpf.Map, fallbackDir string) *fileTable {
	return &fileTable{
		byKey:       make(map[fileKey]*fileEntry),
		cands:       make(map[fileKey]string),
		filt:        filt,
		deny:        deny,
		fallbackDir: fallbackDir,
		interps:     make(map[string]string),
	}
}

func (t *fileTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.list)
}

// addCandidate records that path named key at some point.
func (t *fileTable) addCandidate(key fileKey, path string) {
	t.mu.Lock()
	if _, ok := t.cands[key]; !ok {
		t.cands[key] = path
	}
	e := t.byKey[key]
	var upd bool
	if e != nil && e.path == "" {
		e.path = path
		upd = true
	}
	t.mu.Unlock()
	if upd {
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil {
			t.setState(e, t.filt.decide(path, &st))
		}
	}
}

func (t *fileTable) setState(e *fileEntry, s uint32) {
	e.state.Store(s)
	if s == stateDenied && t.deny != nil {
		k := bpf.RecordFilekey{Ino: e.key.ino, Dev: e.key.dev}
		if t.deny.Put(&k, uint8(2)) == nil && t.denyActive != nil && !t.denyOn.Swap(true) {
			_ = t.denyActive.Set(uint32(1))
		}
	}
}

// get returns the entry for key or nil.
func (t *fileTable) get(key fileKey) *fileEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byKey[key]
}

// add creates the entry for key (first sight), resolving its path from the
// open candidates or, failing that, from /proc/pid of the process that
// touched it. pid 0 skips the /proc scan.
func (t *fileTable) add(key fileKey, pid uint32, path string) *fileEntry {
	t.mu.Lock()
	if e := t.byKey[key]; e != nil {
		t.mu.Unlock()
		return e
	}
	if path == "" {
		path = t.cands[key]
	}
	t.mu.Unlock()
	if path == "" && pid != 0 {
		path = scanProc(pid, key)
	}
	state := t.filt.unknownState()
	size := int64(-1)
	if path != "" {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err == nil && statKey(&st) == key {
			state = t.filt.decide(path, &st)
			size = st.Size
		} else {
			state = t.filt.decide(path, nil)
		}
	}
	t.mu.Lock()
	if e := t.byKey[key]; e != nil { // lost a race
		t.mu.Unlock()
		return e
	}
	e := &fileEntry{id: uint32(len(t.list)), key: key, path: path}
	if size >= 0 {
		e.pages, e.statAt = (uint64(size)+4095)/4096, monoNow()
	}
	t.byKey[key] = e
	t.list = append(t.list, e)
	t.mu.Unlock()
	t.setState(e, state)
	return e
}

func statKey(st *unix.Stat_t) fileKey {
	return fileKey{dev: uint32(formats.KernelDev(st.Dev)), ino: st.Ino}
}

// scanProc looks for key among the mappings and open files of pid.
func scanProc(pid uint32, key fileKey) string {
	dir := "/proc/" + strconv.FormatUint(uint64(pid), 10)
	if p := scanMaps(dir+"/maps", key); p != "" {
		return p
	}
	ents, err := os.ReadDir(dir + "/fd")
	if err == nil {
		for _, e := range ents {
			p, err := os.Readlink(dir + "/fd/" + e.Name())
			if err != nil || !strings.HasPrefix(p, "/") {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(dir+"/fd/"+e.Name(), &st) == nil && statKey(&st) == key {
				return strings.TrimSuffix(p, " (deleted)")
			}
		}
	}
	if p, err := os.Readlink(dir + "/exe"); err == nil {
		var st unix.Stat_t
		if unix.Stat(dir+"/exe", &st) == nil && statKey(&st) == key {
			return p
		}
	}
	return ""
}

// scanMaps finds key in a /proc/PID/maps file: "addr perms off MAJ:MIN ino path".
func scanMaps(name string, key fileKey) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue
		}
		ino, err := strconv.ParseUint(f[4], 10, 64)
		if err != nil || ino != key.ino {
			continue
		}
		mm, _, ok := strings.Cut(f[3], ":")
		if !ok {
			continue
		}
		maj, err1 := strconv.ParseUint(mm, 16, 32)
		min, err2 := strconv.ParseUint(f[3][len(mm)+1:], 16, 32)
		if err1 != nil || err2 != nil || uint32(maj<<20|min) != key.dev {
			continue
		}
		return strings.Join(f[5:], " ")
	}
	return ""
}

// resolveOpen turns an open(2) path of pid into an absolute path and
// records it as a candidate for the file it names now.
func (t *fileTable) resolveOpen(pid uint32, dfd int32, path string, exec bool) {
	if path == "" {
		return
	}
	if !filepath.IsAbs(path) {
		proc := "/proc/" + strconv.FormatUint(uint64(pid), 10)
		var base string
		var err error
		if dfd == unix.AT_FDCWD {
			base, err = os.Readlink(proc + "/cwd")
		} else {
			base, err = os.Readlink(proc + "/fd/" + strconv.Itoa(int(dfd)))
		}
		if err != nil {
			if t.fallbackDir == "" || dfd != unix.AT_FDCWD {
				return
			}
			base = t.fallbackDir
		}
		path = filepath.Join(base, path)
	}
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	path = filepath.Clean(path)
	t.addCandidate(statKey(&st), path)
	if exec {
		// The kernel maps the ELF interpreter without an open(2).
		if interp := t.interp(path); interp != "" && unix.Stat(interp, &st) == nil {
			t.addCandidate(statKey(&st), interp)
		}
	}
}

// interp returns the PT_INTERP of an executable, cached.
func (t *fileTable) interp(path string) string {
	t.mu.Lock()
	v, ok := t.interps[path]
	t.mu.Unlock()
	if ok {
		return v
	}
	if f, err := elf.Open(path); err == nil {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, min(p.Filesz, 4096))
				if _, err := p.ReadAt(b, 0); err == nil {
					v = strings.TrimRight(string(b), "\x00")
				}
			}
		}
		f.Close()
	}
	t.mu.Lock()
	t.interps[path] = v
	t.mu.Unlock()
	return v
}

// files returns the files.arrow rows: path, size and mtime of every file
// that still exists under the path it was seen with.
func (t *fileTable) files() (rows []formats.File, unresolved int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rows = make([]formats.File, 0, len(t.list))
	for _, e := range t.list {
		f := t.rowLocked(e)
		if f.Path == "" {
			unresolved++
		}
		rows = append(rows, f)
	}
	return rows, unresolved
}

// row returns the files.arrow row of file id as known now. The bundle
// writer calls it (formats.WithFileResolver) when the first batch that
// references id is written, so that the row reaches disk with that batch.
func (t *fileTable) row(id uint32) formats.File {
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(id) >= len(t.list) {
		return formats.File{ID: id}
	}
	return t.rowLocked(t.list[id])
}

func (t *fileTable) rowLocked(e *fileEntry) formats.File {
	f := formats.File{ID: e.id, Dev: uint64(e.key.dev), Ino: e.key.ino, Path: e.path}
	if f.Path == "" {
		f.Path = t.cands[e.key]
	}
	if f.Path != "" {
		var st unix.Stat_t
		if unix.Stat(f.Path, &st) == nil && statKey(&st) == e.key {
			f.Size = uint64(st.Size)
			f.MtimeNS = st.Mtim.Nano()
			f.Mode = st.Mode
		}
	}
	return f
}

// pathOf returns e's path.
func (t *fileTable) pathOf(e *fileEntry) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.path == "" {
		return t.cands[e.key]
	}
	return e.path
}

// restatAfter is how long a file's size is trusted before an event beyond
// it makes the writer stat the file again (it may have grown).
const restatAfter = 100 * 1000 * 1000

// clamp trims [first, first+n) to the file's pages. It returns 0 when the
// range lies wholly beyond the end of the file (a read at EOF, a
// fault-around window or large folio past it).
func (t *fileTable) clamp(e *fileEntry, first uint64, n uint32) uint32 {
	end := first + uint64(n)
	if e.pages == 0 && e.statAt == 0 || end <= e.pages {
		return n
	}
	if now := monoNow(); now-e.statAt > restatAfter {
		var st unix.Stat_t
		if p := t.pathOf(e); p != "" && unix.Stat(p, &st) == nil && statKey(&st) == e.key {
			e.setSize(&st, now)
		} else {
			e.statAt = now
		}
		if end <= e.pages {
			return n
		}
	}
	if first >= e.pages {
		return 0
	}
	return uint32(e.pages - first)
}
