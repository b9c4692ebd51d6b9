package source

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
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
	id       uint32
	key      fileKey // zero for a path-only file
	pathOnly bool    // a path looked up that did not exist: no inode
	block    bool    // a block device's cached blocks (blockDevice)
	state    atomic.Uint32
	path     string // guarded by fileTable.mu
	// pages is the file's size in pages when last stat'ed (0: unknown),
	// statAt when (monotonic ns); used by the decoder only.
	pages  uint64
	statAt uint64
	// size, mtime and mode from the stat when the file was added, and
	// when (monotonic ns; 0: no stat matched its inode); guarded by
	// fileTable.mu.
	size    uint64
	mtime   int64
	mode    uint32
	addedAt uint64
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

// decide returns the state for a resolved file. Regular files and
// directories (the files of readdir and stat rows) are kept; devices,
// pipes and sockets never.
func (f *filter) decide(path string, st *unix.Stat_t) uint32 {
	if st != nil && st.Mode&unix.S_IFMT != unix.S_IFREG && st.Mode&unix.S_IFMT != unix.S_IFDIR {
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

// decideBlock returns the state of a block device's cached blocks (a
// filesystem's metadata, read on the traced program's behalf): kept unless
// an --exclude of the user's names the device. The default excludes (/dev)
// and the include and size filters, which choose files, do not apply.
func (f *filter) decideBlock(path string) uint32 {
	for _, p := range f.exclude {
		if !slices.Contains(defaultExcludes, p) && hasPathPrefix(path, p) {
			return stateDenied
		}
	}
	return stateAllowed
}

// blockDevice returns the path (/dev/NAME) and size of the block device
// whose page cache key names: the kernel caches a block device's blocks (a
// filesystem's metadata: inode tables, directories, extent blocks) in the
// device's inode on the anonymous bdev filesystem, whose inode number is
// the device's dev_t.
func blockDevice(key fileKey) (path string, size uint64, ok bool) {
	maj, min := key.ino>>20, key.ino&(1<<20-1)
	if key.dev>>20 != 0 || maj == 0 || maj >= 1<<12 {
		return "", 0, false // not an anonymous superblock, or not a dev_t
	}
	sys := "/sys/dev/block/" + strconv.FormatUint(maj, 10) + ":" + strconv.FormatUint(min, 10)
	link, err := os.Readlink(sys)
	if err != nil {
		return "", 0, false
	}
	if b, err := os.ReadFile(sys + "/size"); err == nil {
		if sectors, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			size = sectors * 512
		}
	}
	return "/dev/" + filepath.Base(link), size, true
}

// unknownState is the state of a file whose path could not be found.
func (f *filter) unknownState() uint32 {
	if len(f.include) > 0 || f.minSize > 0 {
		return stateDenied
	}
	return stateUnknown
}

// fileTable assigns file ids and resolves (dev, ino) to paths. It is shared
// by the event decoder, the opens reader and the hint server.
type fileTable struct {
	mu          sync.Mutex
	byKey       map[fileKey]*fileEntry
	byPath      map[string]*fileEntry // path-only files
	list        []*fileEntry
	fresh       []formats.File     // rows of files added since takeFresh
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
		byPath:      make(map[string]*fileEntry),
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
	size, mtime, mode := int64(-1), int64(0), uint32(0)
	if path == "" {
		if bp, bs, ok := blockDevice(key); ok {
			path, size, mode = bp, int64(bs), unix.S_IFBLK|0o660
			state = t.filt.decideBlock(bp)
		}
	} else {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err == nil && statKey(&st) == key {
			state = t.filt.decide(path, &st)
			size, mtime, mode = st.Size, st.Mtim.Nano(), st.Mode
		} else {
			state = t.filt.decide(path, nil)
		}
	}
	t.mu.Lock()
	if e := t.byKey[key]; e != nil { // lost a race
		t.mu.Unlock()
		return e
	}
	// Ids start at 1: a hint's file_id 0 means "no file" (docs/format.md).
	e := &fileEntry{id: uint32(len(t.list) + 1), key: key, path: path, block: mode&unix.S_IFMT == unix.S_IFBLK}
	if size >= 0 {
		e.pages, e.statAt = (uint64(size)+4095)/4096, monoNow()
		e.size, e.mtime, e.mode, e.addedAt = uint64(size), mtime, mode, e.statAt
	}
	t.byKey[key] = e
	t.list = append(t.list, e)
	t.setState(e, state)
	if state != stateDenied {
		t.fresh = append(t.fresh, formats.File{ID: e.id, Dev: uint64(key.dev), Ino: key.ino, Path: path,
			Size: uint64(max(size, 0)), MtimeNS: mtime, Mode: mode})
	}
	t.mu.Unlock()
	return e
}

// takeFresh appends the rows of the files added since the last call to dst.
// A file is added before any event or hint that names it is decoded, so a
// batch that takes the fresh rows when it is delivered carries every file
// it references that no earlier batch carried.
func (t *fileTable) takeFresh(dst []formats.File) []formats.File {
	t.mu.Lock()
	defer t.mu.Unlock()
	dst = append(dst, t.fresh...)
	clear(t.fresh)
	t.fresh = t.fresh[:0]
	return dst
}

// row returns the current files.arrow row of file id: its path (or the best
// candidate seen so far) and the size and mtime of its last stat.
func (t *fileTable) row(id uint32) (formats.File, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id == 0 || int(id) > len(t.list) {
		return formats.File{}, false
	}
	e := t.list[id-1]
	f := formats.File{ID: e.id, Dev: uint64(e.key.dev), Ino: e.key.ino, Path: e.path, Size: e.size, MtimeNS: e.mtime, Mode: e.mode}
	if f.Path == "" {
		f.Path = t.cands[e.key]
	}
	return f, true
}

// addPathOnly returns the path-only file of path (a lookup that failed),
// made on first sight: files.arrow's row has ino 0 and mode 0.
func (t *fileTable) addPathOnly(path string) *fileEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.byPath[path]; e != nil {
		return e
	}
	e := &fileEntry{id: uint32(len(t.list) + 1), path: path, pathOnly: true}
	t.byPath[path] = e
	t.list = append(t.list, e)
	state := t.filt.decide(path, nil)
	if t.filt.minSize > 0 {
		state = stateDenied // no file, no size
	}
	e.state.Store(state)
	if state != stateDenied {
		t.fresh = append(t.fresh, formats.File{ID: e.id, Path: path})
	}
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
	if path = t.absPath(pid, dfd, path); path == "" {
		return
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

// absPath makes path, as process pid gave it to a system call relative to
// the directory fd dfd (or its working directory, AT_FDCWD), absolute and
// clean. It returns "" when that directory is gone (the process exited)
// and is not the recorder's own working directory, which a command
// inherits.
func (t *fileTable) absPath(pid uint32, dfd int32, path string) string {
	if path == "" {
		return ""
	}
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
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
			return ""
		}
		base = t.fallbackDir
	}
	return filepath.Join(base, path)
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

// files returns the files.arrow rows of every file, stat'ed now (rowNow).
func (t *fileTable) files() (rows []formats.File, unresolved int) {
	n := t.count()
	rows = make([]formats.File, 0, n)
	for i := range n {
		f, _ := t.rowNow(uint32(i + 1))
		if f.Path == "" {
			unresolved++
		}
		rows = append(rows, f)
	}
	return rows, unresolved
}

// statFresh is how long the stat a file was added with stands for it in
// its files.arrow row: a file's first event and its row usually come
// within one writer flush, and a second stat of every file cost a
// recording of grep -r 10% of the recorder's CPU.
const statFresh = 1000 * 1000 * 1000

// rowNow returns the files.arrow row of file id with its best path,
// stat'ed now (or within statFresh): size, mtime and mode when the file
// still exists under that path with the same device and inode (else they
// stay 0).
func (t *fileTable) rowNow(id uint32) (formats.File, bool) {
	t.mu.Lock()
	if id == 0 || int(id) > len(t.list) {
		t.mu.Unlock()
		return formats.File{}, false
	}
	e := t.list[id-1]
	f := formats.File{ID: e.id, Dev: uint64(e.key.dev), Ino: e.key.ino, Path: e.path}
	if f.Path == "" {
		f.Path = t.cands[e.key]
	}
	if e.block { // its path names the device node, not its bdev inode
		f.Size, f.Mode = e.size, e.mode
		t.mu.Unlock()
		return f, true
	}
	if e.addedAt != 0 && monoNow()-e.addedAt < statFresh {
		f.Size, f.MtimeNS, f.Mode = e.size, e.mtime, e.mode
		t.mu.Unlock()
		return f, true
	}
	t.mu.Unlock()
	if f.Path != "" && !e.pathOnly {
		var st unix.Stat_t
		if unix.Stat(f.Path, &st) == nil && statKey(&st) == e.key {
			f.Size, f.MtimeNS, f.Mode = uint64(st.Size), st.Mtim.Nano(), st.Mode
		}
	}
	return f, true
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
