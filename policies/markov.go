package policies

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// FileKey identifies a file across runs: by path, and by size and mtime so
// that a file changed since training is detected.
type FileKey struct {
	Path    string
	Size    uint64 // bytes
	MtimeNS int64
}

// Transition is one outgoing edge of a Markov state.
type Transition struct {
	Next uint64  // page
	P    float64 // probability, in (0, 1]
}

// FileModel is the first-order transition model of one file: for each
// page, the pages that followed it in training, most likely first.
type FileModel struct {
	Key    FileKey
	states stateTable
}

// Next returns the transitions out of page, most likely first.
func (m *FileModel) Next(page uint64) []Transition { return m.states.get(page) }

// States returns the number of pages with outgoing transitions.
func (m *FileModel) States() int { return m.states.n }

// stateTable maps a page to its transitions: an open-addressing table
// (linear probing, load at most 1/2, Fibonacci hashing) of (page, offset,
// count) into one array holding every state's transitions, with the most
// likely transition also kept in the slot. A lookup is a multiply and
// usually one probe, and a walk step that takes the most likely transition
// touches no other memory: the markov walk makes one per step.
type stateTable struct {
	slots []stateSlot
	shift uint8 // 64 - log2(len(slots))
	trans []Transition
	n     int
}

type stateSlot struct {
	page  uint64
	first Transition // trans[off]
	off   uint32
	n     uint32 // transitions; 0: free slot
}

func (t *stateTable) home(page uint64) uint64 { return (page * 0x9E3779B97F4A7C15) >> t.shift }

// get returns the transitions of page, nil if it has none.
func (t *stateTable) get(page uint64) []Transition {
	if s := t.slot(page); s != nil {
		return t.trans[s.off : s.off+s.n : s.off+s.n]
	}
	return nil
}

// slot returns the slot of page, nil if it has no transitions.
func (t *stateTable) slot(page uint64) *stateSlot {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(page); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.n == 0 {
			return nil
		}
		if s.page == page {
			return s
		}
	}
}

// grow makes room for n states in all.
func (t *stateTable) grow(n int) {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	if size <= len(t.slots) {
		return
	}
	old := t.slots
	t.slots = make([]stateSlot, size)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	for _, s := range old {
		if s.n != 0 {
			t.insert(s)
		}
	}
}

func (t *stateTable) insert(s stateSlot) {
	mask := uint64(len(t.slots) - 1)
	i := t.home(s.page)
	for t.slots[i].n != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

// add stores ts (non-empty) as the transitions of page, copying them into
// the table's array. It reports false, storing nothing, when page already
// has transitions or the array would pass 2^32 transitions.
func (t *stateTable) add(page uint64, ts []Transition) bool {
	if len(ts) == 0 || t.get(page) != nil || len(t.trans)+len(ts) > math.MaxUint32 {
		return false
	}
	t.grow(t.n + 1)
	off := len(t.trans)
	t.trans = append(t.trans, ts...)
	t.insert(stateSlot{page: page, first: ts[0], off: uint32(off), n: uint32(len(ts))})
	t.n++
	return true
}

// pages returns the pages that have transitions, in increasing order.
func (t *stateTable) pages() []uint64 {
	out := make([]uint64, 0, t.n)
	for _, s := range t.slots {
		if s.n != 0 {
			out = append(out, s.page)
		}
	}
	slices.Sort(out)
	return out
}

// MarkovModel holds one FileModel per trained file, keyed by path.
type MarkovModel struct {
	// PageSize is the page size the model was trained with.
	PageSize uint32
	// Runs is the number of training runs.
	Runs  uint32
	files map[string]*FileModel
}

// ErrFileChanged is returned by Lookup when a file's size or mtime differs
// from the one the model was trained on.
var ErrFileChanged = errors.New("file changed since training")

// Files returns the models, sorted by path.
func (m *MarkovModel) Files() []*FileModel {
	out := make([]*FileModel, 0, len(m.files))
	for _, f := range m.files {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.Path < out[j].Key.Path })
	return out
}

// Lookup returns the model of the file with key k. It returns nil, nil
// when no model has k's path, and ErrFileChanged (wrapped, naming the
// file) when the path is known but size or mtime differ.
func (m *MarkovModel) Lookup(k FileKey) (*FileModel, error) {
	if m == nil {
		return nil, nil
	}
	f := m.files[k.Path]
	if f == nil {
		return nil, nil
	}
	if f.Key.Size != k.Size || f.Key.MtimeNS != k.MtimeNS {
		return nil, fmt.Errorf("look up model of %s: trained on size %d mtime %d, now size %d mtime %d: %w",
			k.Path, f.Key.Size, f.Key.MtimeNS, k.Size, k.MtimeNS, ErrFileChanged)
	}
	return f, nil
}

// MarkovBuilder counts page transitions across runs and builds a
// MarkovModel.
type MarkovBuilder struct {
	PageSize uint32
	runs     map[int]struct{}
	files    map[string]*builderFile
	warnings []string
}

type builderFile struct {
	key    FileKey
	counts pairCounts
	runs   int
}

// pairCounts counts (from, to) transitions in one open-addressing table
// (linear probing, load at most 3/4): one probe sequence per transition
// instead of a map of maps, and no allocation per state. sorted turns the
// table into a sorted list in place; the next add rebuilds the table.
type pairCounts struct {
	slots  []pairCount
	n      int
	sorted bool // slots[:n] is a sorted list, not a hash table
}

type pairCount struct {
	from, to uint64
	count    uint32 // 0: free slot
}

func (t *pairCounts) home(from, to uint64) uint64 {
	h := (from*0x9E3779B97F4A7C15 ^ to) * 0xBF58476D1CE4E5B9
	return (h ^ h>>31) & uint64(len(t.slots)-1)
}

// add counts one transition.
func (t *pairCounts) add(from, to uint64) {
	if t.sorted || 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(from, to); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.count == 0 {
			*s = pairCount{from, to, 1}
			t.n++
			return
		}
		if s.from == from && s.to == to {
			s.count++
			return
		}
	}
}

func (t *pairCounts) grow() {
	old := t.slots
	size := len(old)
	if 4*(t.n+1) > 3*size {
		size = max(2*size, 1024)
	}
	t.slots = make([]pairCount, size)
	t.sorted = false
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if s.count == 0 {
			continue
		}
		i := t.home(s.from, s.to)
		for t.slots[i].count != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// list returns the transitions ordered by from (then to), compacting and
// sorting the table in place.
func (t *pairCounts) list() []pairCount {
	if !t.sorted {
		j := 0
		for i := range t.slots {
			if t.slots[i].count != 0 {
				t.slots[j] = t.slots[i]
				j++
			}
		}
		clear(t.slots[j:])
		slices.SortFunc(t.slots[:j], func(a, b pairCount) int {
			if c := cmp.Compare(a.from, b.from); c != 0 {
				return c
			}
			return cmp.Compare(a.to, b.to)
		})
		t.sorted = true
	}
	return t.slots[:t.n]
}

// NewMarkovBuilder returns an empty builder for pageSize-byte pages (0
// means DefaultPageSize).
func NewMarkovBuilder(pageSize uint32) *MarkovBuilder {
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	return &MarkovBuilder{PageSize: pageSize, files: map[string]*builderFile{}, runs: map[int]struct{}{}}
}

// AddRun adds the page sequence of one file in one run. run numbers the
// training run (used to count runs). Consecutive repeats of a page are
// collapsed. A file whose size or mtime differ from an earlier run of the
// same path replaces the earlier data (the newest version wins) and a
// warning is recorded.
func (b *MarkovBuilder) AddRun(run int, key FileKey, pages []uint64) {
	b.runs[run] = struct{}{}
	f := b.files[key.Path]
	if f != nil && (f.key.Size != key.Size || f.key.MtimeNS != key.MtimeNS) {
		b.warnings = append(b.warnings, fmt.Sprintf("train %s: size/mtime changed between runs (size %d mtime %d -> size %d mtime %d); keeping the newer version only",
			key.Path, f.key.Size, f.key.MtimeNS, key.Size, key.MtimeNS))
		f = nil
	}
	if f == nil {
		f = &builderFile{key: key}
		b.files[key.Path] = f
	}
	f.runs++
	for i := 1; i < len(pages); i++ {
		from, to := pages[i-1], pages[i]
		if from == to {
			continue
		}
		f.counts.add(from, to)
	}
}

// Warnings returns what AddRun noticed, e.g. files that changed.
func (b *MarkovBuilder) Warnings() []string { return b.warnings }

// Build returns the model: per state, transition probabilities are counts
// normalized to sum to 1, sorted most likely first (ties by page).
func (b *MarkovBuilder) Build() *MarkovModel {
	m := &MarkovModel{PageSize: b.PageSize, Runs: uint32(len(b.runs)), files: map[string]*FileModel{}}
	for path, bf := range b.files {
		pairs := bf.counts.list()
		nstates := 0
		for i := range pairs {
			if i == 0 || pairs[i].from != pairs[i-1].from {
				nstates++
			}
		}
		fm := &FileModel{Key: bf.key}
		fm.states.grow(nstates)
		fm.states.trans = make([]Transition, 0, len(pairs))
		all := make([]Transition, len(pairs))
		for i := 0; i < len(pairs); {
			j := i
			var total uint64
			for ; j < len(pairs) && pairs[j].from == pairs[i].from; j++ {
				total += uint64(pairs[j].count)
			}
			ts := all[i:j:j]
			for k := i; k < j; k++ {
				ts[k-i] = Transition{Next: pairs[k].to, P: float64(pairs[k].count) / float64(total)}
			}
			sortTransitions(ts)
			fm.states.add(pairs[i].from, ts)
			i = j
		}
		m.files[path] = fm
	}
	return m
}

func sortTransitions(ts []Transition) {
	slices.SortFunc(ts, func(a, b Transition) int {
		switch {
		case a.P > b.P:
			return -1
		case a.P < b.P:
			return 1
		case a.Next < b.Next:
			return -1
		case a.Next > b.Next:
			return 1
		}
		return 0
	})
}

// Model file format (docs/policies.md is normative), all little-endian:
//
//	magic    [8]byte "PIOMARKV"
//	version  uint32  (MarkovVersion)
//	pagesize uint32
//	runs     uint32
//	nfiles   uint32
//	per file: pathlen uint32, path, size uint64, mtime_ns int64, nstates uint32,
//	  per state: page uint64, ntrans uint32, per transition: next uint64, p float64
//	crc32    uint32  (IEEE, of everything before it)
const (
	MarkovMagic   = "PIOMARKV"
	MarkovVersion = 1
)

// Bounds enforced when loading a model.
const (
	maxModelFiles  = 1 << 20
	maxModelPath   = 4096
	maxModelStates = 1 << 26
	maxModelTrans  = 1 << 16
	probEpsilon    = 1e-6
)

// ErrBadModel is wrapped by every Load validation error.
var ErrBadModel = errors.New("invalid markov model")

// Save writes the model in the versioned binary format.
func (m *MarkovModel) Save(w io.Writer) error {
	h := crc32.NewIEEE()
	bw := bufio.NewWriter(io.MultiWriter(w, h))
	var buf [8]byte
	u32 := func(v uint32) { binary.LittleEndian.PutUint32(buf[:4], v); bw.Write(buf[:4]) }
	u64 := func(v uint64) { binary.LittleEndian.PutUint64(buf[:], v); bw.Write(buf[:]) }
	bw.WriteString(MarkovMagic)
	u32(MarkovVersion)
	u32(m.PageSize)
	u32(m.Runs)
	files := m.Files()
	u32(uint32(len(files)))
	for _, f := range files {
		u32(uint32(len(f.Key.Path)))
		bw.WriteString(f.Key.Path)
		u64(f.Key.Size)
		u64(uint64(f.Key.MtimeNS))
		pages := f.states.pages()
		u32(uint32(len(pages)))
		for _, p := range pages {
			ts := f.states.get(p)
			u64(p)
			u32(uint32(len(ts)))
			for _, t := range ts {
				u64(t.Next)
				u64(math.Float64bits(t.P))
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("save markov model: %w", err)
	}
	binary.LittleEndian.PutUint32(buf[:4], h.Sum32())
	if _, err := w.Write(buf[:4]); err != nil {
		return fmt.Errorf("save markov model: %w", err)
	}
	return nil
}

type modelReader struct {
	r   *bufio.Reader
	h   hash.Hash32
	off int64
	err error
}

func (mr *modelReader) read(p []byte, field string) {
	if mr.err != nil {
		return
	}
	if _, err := io.ReadFull(mr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		mr.err = fmt.Errorf("load markov model: read %s at offset %d: %w", field, mr.off, err)
		return
	}
	mr.h.Write(p)
	mr.off += int64(len(p))
}

func (mr *modelReader) u32(field string) uint32 {
	var b [4]byte
	mr.read(b[:], field)
	return binary.LittleEndian.Uint32(b[:])
}

func (mr *modelReader) u64(field string) uint64 {
	var b [8]byte
	mr.read(b[:], field)
	return binary.LittleEndian.Uint64(b[:])
}

func (mr *modelReader) bad(format string, args ...any) {
	if mr.err == nil {
		mr.err = fmt.Errorf("load markov model: %s (offset %d): %w", fmt.Sprintf(format, args...), mr.off, ErrBadModel)
	}
}

// Load reads and validates a model written by Save: magic, version,
// bounds, page numbers within the file size, probabilities in (0, 1]
// summing to 1 within 1e-6, and the checksum. Memory grows with the data
// actually read, never with a count field.
func Load(r io.Reader) (*MarkovModel, error) {
	mr := &modelReader{r: bufio.NewReader(r), h: crc32.NewIEEE()}
	var magic [8]byte
	mr.read(magic[:], "magic")
	if mr.err == nil && string(magic[:]) != MarkovMagic {
		mr.bad("magic is %q, want %q: not a predictio markov model", magic[:], MarkovMagic)
	}
	if v := mr.u32("version"); mr.err == nil && v != MarkovVersion {
		mr.bad("version %d is not supported (want %d); retrain with this predictio", v, MarkovVersion)
	}
	m := &MarkovModel{files: map[string]*FileModel{}}
	m.PageSize = mr.u32("page_size")
	if mr.err == nil && (m.PageSize < 512 || m.PageSize > 1<<20 || m.PageSize&(m.PageSize-1) != 0) {
		mr.bad("page_size %d is not a power of two in [512, 1MiB]", m.PageSize)
	}
	m.Runs = mr.u32("runs")
	nfiles := mr.u32("nfiles")
	if mr.err == nil && nfiles > maxModelFiles {
		mr.bad("nfiles %d exceeds %d", nfiles, maxModelFiles)
	}
	for i := uint32(0); i < nfiles && mr.err == nil; i++ {
		plen := mr.u32("path length")
		if mr.err == nil && plen > maxModelPath {
			mr.bad("file %d: path length %d exceeds %d", i, plen, maxModelPath)
			break
		}
		path := make([]byte, plen)
		mr.read(path, "path")
		f := &FileModel{Key: FileKey{Path: string(path)}}
		f.Key.Size = mr.u64("size")
		f.Key.MtimeNS = int64(mr.u64("mtime"))
		if mr.err == nil && m.files[f.Key.Path] != nil {
			mr.bad("file %q appears twice", f.Key.Path)
		}
		pages := (f.Key.Size + uint64(m.PageSize) - 1) / uint64(m.PageSize)
		nstates := mr.u32("nstates")
		if mr.err == nil && (nstates > maxModelStates || uint64(nstates) > pages) {
			mr.bad("file %q: nstates %d exceeds bounds (%d pages)", f.Key.Path, nstates, pages)
		}
		for s := uint32(0); s < nstates && mr.err == nil; s++ {
			page := mr.u64("state page")
			nt := mr.u32("ntrans")
			if mr.err != nil {
				break
			}
			if page >= pages {
				mr.bad("file %q: state page %d beyond end of file (%d pages)", f.Key.Path, page, pages)
				break
			}
			if f.states.get(page) != nil {
				mr.bad("file %q: state page %d appears twice", f.Key.Path, page)
				break
			}
			if nt == 0 || nt > maxModelTrans || uint64(nt) > pages {
				mr.bad("file %q page %d: ntrans %d out of range [1, %d]", f.Key.Path, page, nt, min(maxModelTrans, pages))
				break
			}
			var ts []Transition
			sum := 0.0
			for t := uint32(0); t < nt && mr.err == nil; t++ {
				next := mr.u64("transition page")
				p := math.Float64frombits(mr.u64("transition probability"))
				if mr.err != nil {
					break
				}
				if next >= pages {
					mr.bad("file %q page %d: transition to page %d beyond end of file (%d pages)", f.Key.Path, page, next, pages)
					break
				}
				if !(p > 0 && p <= 1) {
					mr.bad("file %q page %d: probability %v not in (0, 1]", f.Key.Path, page, p)
					break
				}
				sum += p
				ts = append(ts, Transition{Next: next, P: p})
			}
			if mr.err == nil && math.Abs(sum-1) > probEpsilon {
				mr.bad("file %q page %d: probabilities sum to %v, want 1", f.Key.Path, page, sum)
			}
			if mr.err != nil {
				break
			}
			sortTransitions(ts)
			if !f.states.add(page, ts) {
				mr.bad("file %q: more than %d transitions", f.Key.Path, uint32(math.MaxUint32))
			}
		}
		m.files[f.Key.Path] = f
	}
	if mr.err != nil {
		return nil, mr.err
	}
	want := mr.h.Sum32()
	var b [4]byte
	if _, err := io.ReadFull(mr.r, b[:]); err != nil {
		return nil, fmt.Errorf("load markov model: read checksum at offset %d: %w", mr.off, io.ErrUnexpectedEOF)
	}
	if got := binary.LittleEndian.Uint32(b[:]); got != want {
		return nil, fmt.Errorf("load markov model: checksum %08x, computed %08x: file is corrupt: %w", got, want, ErrBadModel)
	}
	if n, _ := mr.r.Read(b[:1]); n > 0 {
		return nil, fmt.Errorf("load markov model: trailing data after checksum at offset %d: %w", mr.off+4, ErrBadModel)
	}
	return m, nil
}
