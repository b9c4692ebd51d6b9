package policies

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/predictio/predictio/formats"
)

// Launch profiles: what the recent launches of one program touched, so that
// the next launch can be prefetched from its exec on, across files and in
// the order the program will need them. markov predicts within a file it
// has seen an access to; a launch profile predicts the first access to
// every file, and its metadata (lookups, inodes, directory entries).

// Launch profile bounds. A profile past them is refused when read and
// trimmed when learned.
const (
	// MaxLaunches is the most launches a profile keeps.
	MaxLaunches = 64
	// MaxLaunchFiles is the most files of one profile.
	MaxLaunchFiles = 1 << 16
	// MaxLaunchRanges is the most page ranges of one launch.
	MaxLaunchRanges = 1 << 20
	// maxLaunchPath is the longest path a profile holds (PATH_MAX).
	maxLaunchPath = 4096
	// maxLaunchPage bounds page numbers (2^52 pages of 4 KiB: 16 EiB).
	maxLaunchPage = 1 << 52
)

// LaunchFile is a file of a launch profile as it was when last learned:
// its path and identity. Dev is in the kernel's s_dev encoding
// (major<<20 | minor), as in bundles and eBPF events. A file with Ino 0
// and Mode 0 is a path the launch looked up and did not find (a
// path-only file of a bundle). Directories are files too (Mode
// S_IFDIR): those the launch listed or stat'ed.
type LaunchFile struct {
	Path    string
	Dev     uint64
	Ino     uint64
	Size    uint64
	MtimeNS int64
	Mode    uint32
}

// Key returns the file's identity for model lookups.
func (f *LaunchFile) Key() FileKey { return FileKey{Path: f.Path, Size: f.Size, MtimeNS: f.MtimeNS} }

// PathOnly reports whether f is a failed lookup: no inode.
func (f *LaunchFile) PathOnly() bool { return f.Ino == 0 && f.Mode == 0 }

// IsDir reports whether f is a directory.
func (f *LaunchFile) IsDir() bool { return f.Mode&formats.ModeType == formats.ModeDir }

// Same reports whether g is the same file, unchanged: path, device, inode,
// size and mtime.
func (f *LaunchFile) Same(g *LaunchFile) bool {
	return f.Path == g.Path && f.Dev == g.Dev && f.Ino == g.Ino && f.Size == g.Size && f.MtimeNS == g.MtimeNS
}

// TouchStructured is a bit of LaunchTouch.Kinds beyond the access kinds:
// a structure adapter recognized the file (a database, an LMDB env, a
// model), so the pages a launch read of it follow the keys it looked up
// more than the program. Such a file is planned from the pages its
// launches share even when mapped, and from each launch's first
// scatterRanges ranges until scatterSeen launches touched it.
const TouchStructured = 1 << 31

// LaunchTouch is what one launch did with one file: when it first
// touched it and its demand accesses' pages in the order it touched them
// (an access that continues the previous one is merged into it), so that
// the page sequence of each file can train markov. Ranges is empty for a
// file the launch only looked up (opened or stat'ed, no pages).
type LaunchTouch struct {
	File    uint32 // index into LaunchProfile.Files
	FirstNS uint64 // first access, in ns after the launch began
	// Kinds has bit k set when the launch made an access of
	// formats.AccessKind k to the file (KindReaddir: it listed the
	// directory; KindExec: it ran the file).
	Kinds  uint32
	Ranges []Range
}

// Has reports whether kinds has kind k.
func Has(kinds uint32, k formats.AccessKind) bool { return k < 32 && kinds&(1<<k) != 0 }

// Launch is one recorded launch.
type Launch struct {
	StartUnixNS int64  // wall clock when it began
	WallNS      uint64 // how long it was traced
	Touches     []LaunchTouch
}

// LaunchProfile is what the last launches of one program touched.
type LaunchProfile struct {
	// Program is the executable the launches were started with, resolved
	// (the command of `predictio run`, the path given to exec): the
	// profile's key.
	Program LaunchFile
	// Ran is the file the kernel ran for it (the interpreter, for a
	// script); a bundle's exec rows name it. Path "" when unknown.
	Ran LaunchFile
	// Files are the files the launches touched; Touches index them.
	Files []LaunchFile
	// Launches are the recorded launches, oldest first.
	Launches []Launch

	plan []LaunchStep // computed by Plan
}

// LaunchStep is one file of a profile's prefetch plan.
type LaunchStep struct {
	File    *LaunchFile
	Index   uint32  // index into Files
	FirstNS uint64  // earliest first access over the launches
	Kinds   uint32  // the launches' access kinds (LaunchTouch.Kinds), or'ed
	Ranges  []Range // union of the launches' pages, sorted and disjoint
	Seen    int     // launches that touched the file
	// Sequential says every launch read the file front to back
	// (readsForward: its long runs in ascending page order, 90% of its
	// pages): the kernel's readahead keeps ahead of such a reader once it
	// has started.
	Sequential bool
}

// Plan returns the profile's files in first-access order (the earliest
// first access over its launches), each with the pages that recur among
// the launches that touched it: those at least half of them touched
// (Recurring; every page when one or two did, and every page of a file
// reached through a mapping, whose recorded pages vary with timing). So when launches read
// different parts of one file (a database queried at other keys), what
// only one of them read is not prefetched, while the pages each reads
// are; a file only one launch touched (a new input, a library replaced
// since) keeps all its pages, unless it read the file at scattered
// places or the file is structured (TouchStructured): then, until
// scatterSeen launches touched it, each launch counts only its first
// scatterRanges ranges (scatterHead). It is computed once; AddLaunch
// recomputes it.
func (p *LaunchProfile) Plan() []LaunchStep {
	if p.plan != nil || len(p.Files) == 0 {
		return p.plan
	}
	steps := make([]LaunchStep, len(p.Files))
	per := make([][][]Range, len(p.Files)) // each file's launches' ranges
	for i := range steps {
		steps[i] = LaunchStep{File: &p.Files[i], Index: uint32(i), FirstNS: math.MaxUint64, Sequential: true}
	}
	for _, l := range p.Launches {
		for _, t := range l.Touches {
			s := &steps[t.File]
			s.Seen++
			s.FirstNS = min(s.FirstNS, t.FirstNS)
			s.Kinds |= t.Kinds
			per[t.File] = append(per[t.File], t.Ranges)
			s.Sequential = s.Sequential && readsForward(t.Ranges)
		}
	}
	out := steps[:0]
	for i, s := range steps {
		if s.Seen == 0 {
			continue
		}
		need := Recurring(s.Seen)
		structured := s.Kinds&TouchStructured != 0
		switch {
		case mapped(s.Kinds) && !structured:
			need = 1
		case s.Seen < scatterSeen:
			for j, rs := range per[i] {
				per[i][j] = scatterHead(rs, structured)
			}
		}
		s.Ranges = recurringRanges(per[i], need)
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b LaunchStep) int {
		if c := cmp.Compare(a.FirstNS, b.FirstNS); c != 0 {
			return c
		}
		return cmp.Compare(a.Index, b.Index)
	})
	p.plan = out
	return out
}

// Markov returns a markov model trained on the profile's launches: each
// launch is a run, each touch's accesses in order its file's page
// sequence (at most 2^20 pages per touch).
func (p *LaunchProfile) Markov(pageSize uint32) *MarkovModel {
	return TrainMarkov([]*LaunchProfile{p}, pageSize)
}

// TrainMarkov trains one markov model on the launches of every profile,
// each launch a run.
func TrainMarkov(ps []*LaunchProfile, pageSize uint32) *MarkovModel {
	const maxPages = 1 << 20
	b := NewMarkovBuilder(pageSize)
	var seq []uint64
	run := 0
	for _, p := range ps {
		for _, l := range p.Launches {
			for _, t := range l.Touches {
				seq = seq[:0]
				for _, r := range t.Ranges {
					for pg := r.First; pg < r.First+uint64(r.N) && len(seq) < maxPages; pg++ {
						seq = append(seq, pg)
					}
				}
				if len(seq) > 1 {
					b.AddRun(run, p.Files[t.File].Key(), seq)
				}
			}
			run++
		}
	}
	return b.Build()
}

// Pages returns the number of pages of the profile's plan.
func (p *LaunchProfile) Pages() uint64 {
	var n uint64
	for _, s := range p.Plan() {
		for _, r := range s.Ranges {
			n += uint64(r.N)
		}
	}
	return n
}

// Scattered reads. A launch that read a file at many small scattered
// places (a database queried at some keys) says little about where the
// next launch will read it: the keys change. Until scatterSeen launches
// have touched the file, so that Recurring keeps the pages they share,
// such a touch counts only its first scatterRanges ranges, in the order
// it read them: the header, the schema and the top of the descent that
// queries at other keys read again.
const (
	scatterSeen   = 3
	scatterRanges = 64
	scatterPages  = 4 // a touch is scattered when its ranges average fewer pages
)

// scatterHead returns rs (one launch's touch, in access order) or, when it
// is scattered (more than scatterRanges ranges averaging fewer than
// scatterPages pages; for a structured file, more than scatterRanges
// ranges), its first scatterRanges ranges.
func scatterHead(rs []Range, structured bool) []Range {
	if len(rs) <= scatterRanges || !structured && rangePages(rs) >= scatterPages*uint64(len(rs)) {
		return rs
	}
	return rs[:scatterRanges]
}

// seqRun is the shortest run of pages readsForward counts as a stretch of
// a front-to-back read (the kernel's initial readahead window is 16 pages
// or more); shorter ones are the reads around it.
const seqRun = 16

// readsForward reports whether a launch's touch (rs, in access order) read
// the file front to back: its runs of at least seqRun pages come in
// ascending page order and hold at least 90% of its pages. The pages
// between them may come in any order: a B-tree's interior pages, read as
// a table scan reaches them (sqlite3 reading a table front to back reads
// an interior page at a higher offset before each run of leaves), or a
// header read again.
func readsForward(rs []Range) bool {
	var all, inRuns, last uint64
	seen := false
	for _, r := range rs {
		all += uint64(r.N)
		if r.N < seqRun {
			continue
		}
		if seen && r.First < last {
			return false
		}
		seen, last = true, r.First
		inRuns += uint64(r.N)
	}
	return seen && inRuns*10 >= all*9
}

// mergeRanges sorts rs and merges overlapping and adjacent ranges, in
// mapped reports whether a launch reached a file's pages through a
// mapping (faults, fault-around, exec or mmap). Which of those pages a
// launch records differs from launch to launch with the timing of the
// kernel's fault-around and readahead, so a mapped file keeps the union of
// its launches' pages.
func mapped(kinds uint32) bool {
	return Has(kinds, formats.KindFault) || Has(kinds, formats.KindMap) || Has(kinds, formats.KindExec) || Has(kinds, formats.KindMmap)
}

// Recurring is how many of the n launches that touched a file must have
// touched a page of it for a launch profile to prefetch the page: half of
// them, rounded up, and at least one.
func Recurring(n int) int { return max((n+1)/2, 1) }

// recurringRanges returns the pages at least need of the launches'
// ranges (one slice per launch) cover, sorted and disjoint.
func recurringRanges(launches [][]Range, need int) []Range {
	if need <= 1 {
		var all []Range
		for _, rs := range launches {
			all = append(all, rs...)
		}
		return mergeRanges(all)
	}
	type edge struct {
		at uint64
		d  int
	}
	var edges []edge
	for _, rs := range launches {
		for _, r := range mergeRanges(slices.Clone(rs)) { // a launch counts once a page
			edges = append(edges, edge{r.First, 1}, edge{r.First + uint64(r.N), -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(a.at, b.at) })
	var out []Range
	n, from := 0, uint64(0)
	for i := 0; i < len(edges); {
		at := edges[i].at
		if n >= need && at > from {
			out = appendSpan(out, from, at)
		}
		for ; i < len(edges) && edges[i].at == at; i++ {
			n += edges[i].d
		}
		from = at
	}
	return mergeRanges(out)
}

// appendSpan appends the pages [from, to) as ranges of at most
// math.MaxUint32 pages.
func appendSpan(out []Range, from, to uint64) []Range {
	for from < to {
		n := min(to-from, math.MaxUint32)
		out = append(out, Range{First: from, N: uint32(n)})
		from += n
	}
	return out
}

// place.
func mergeRanges(rs []Range) []Range {
	if len(rs) < 2 {
		return rs
	}
	slices.SortFunc(rs, cmpRange)
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		end := last.First + uint64(last.N)
		if r.First <= end {
			if e := r.First + uint64(r.N); e > end {
				n := e - last.First
				if n > math.MaxUint32 {
					// Too long for one range: start a new one at the cap.
					capEnd := last.First + math.MaxUint32
					last.N = math.MaxUint32
					out = append(out, Range{First: capEnd, N: uint32(e - capEnd)})
					continue
				}
				last.N = uint32(n)
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// AddLaunch merges a launch into the profile: files are matched by path
// and identity (a file whose identity changed replaces its old entry, and
// the older launches' touches of it are dropped), and only the last keep
// launches stay (keep is clamped to 1..MaxLaunches). files are the
// launch's files, indexed by its touches' File.
func (p *LaunchProfile) AddLaunch(l Launch, files []LaunchFile, keep int) error {
	keep = min(max(keep, 1), MaxLaunches)
	for i, t := range l.Touches {
		if int(t.File) >= len(files) {
			return fmt.Errorf("add launch: touch %d names file %d of %d", i, t.File, len(files))
		}
	}
	byPath := make(map[string]uint32, len(p.Files))
	for i := range p.Files {
		byPath[p.Files[i].Path] = uint32(i)
	}
	stale := map[uint32]bool{}
	remap := make([]uint32, len(files))
	for i := range files {
		f := &files[i]
		j, ok := byPath[f.Path]
		switch {
		case !ok:
			j = uint32(len(p.Files))
			p.Files = append(p.Files, *f)
			byPath[f.Path] = j
		case !p.Files[j].Same(f):
			p.Files[j] = *f
			stale[j] = true
		}
		remap[i] = j
	}
	if len(stale) > 0 {
		for li := range p.Launches {
			ts := p.Launches[li].Touches[:0]
			for _, t := range p.Launches[li].Touches {
				if !stale[t.File] {
					ts = append(ts, t)
				}
			}
			p.Launches[li].Touches = ts
		}
	}
	// Two of the launch's files may be one of the profile's (one path:
	// a file that did not exist and then did, or was replaced during
	// the launch): their touches merge, so a launch touches a file once.
	nl := Launch{StartUnixNS: l.StartUnixNS, WallNS: l.WallNS, Touches: make([]LaunchTouch, 0, len(l.Touches))}
	at := make(map[uint32]int, len(l.Touches))
	for _, t := range l.Touches {
		f := remap[t.File]
		if i, dup := at[f]; dup {
			m := &nl.Touches[i]
			m.FirstNS = min(m.FirstNS, t.FirstNS)
			m.Kinds |= t.Kinds
			m.Ranges = append(m.Ranges, t.Ranges...)
			continue
		}
		at[f] = len(nl.Touches)
		nl.Touches = append(nl.Touches, LaunchTouch{File: f, FirstNS: t.FirstNS, Kinds: t.Kinds, Ranges: slices.Clone(t.Ranges)})
	}
	p.Launches = append(p.Launches, nl)
	if n := len(p.Launches) - keep; n > 0 {
		p.Launches = slices.Delete(p.Launches, 0, n)
	}
	p.compact()
	return nil
}

// compact drops files no launch touches any more and renumbers touches.
func (p *LaunchProfile) compact() {
	used := make([]bool, len(p.Files))
	for _, l := range p.Launches {
		for _, t := range l.Touches {
			used[t.File] = true
		}
	}
	remap := make([]uint32, len(p.Files))
	files := p.Files[:0]
	for i, f := range p.Files {
		if used[i] {
			remap[i] = uint32(len(files))
			files = append(files, f)
		}
	}
	clear(p.Files[len(files):])
	p.Files = files
	for li := range p.Launches {
		for ti := range p.Launches[li].Touches {
			t := &p.Launches[li].Touches[ti]
			t.File = remap[t.File]
		}
	}
	p.plan = nil
}

// Invalidate drops a file from the profile (it changed since it was
// learned): every launch's touches of it go, and the next launch learns
// it again.
func (p *LaunchProfile) Invalidate(index uint32) {
	for li := range p.Launches {
		ts := p.Launches[li].Touches[:0]
		for _, t := range p.Launches[li].Touches {
			if t.File != index {
				ts = append(ts, t)
			}
		}
		p.Launches[li].Touches = ts
	}
	p.compact()
}

// TrimRanges drops the touches at the end of the newest launches until
// the profile holds at most max page ranges in all (it keeps the files a
// launch touches first), then drops launches left empty.
func (p *LaunchProfile) TrimRanges(max int) {
	total := 0
	for _, l := range p.Launches {
		for _, t := range l.Touches {
			total += len(t.Ranges)
		}
	}
	for li := len(p.Launches) - 1; li >= 0 && total > max; li-- {
		ts := p.Launches[li].Touches
		for len(ts) > 0 && total > max {
			total -= len(ts[len(ts)-1].Ranges)
			ts = ts[:len(ts)-1]
		}
		p.Launches[li].Touches = ts
	}
	ls := p.Launches[:0]
	for _, l := range p.Launches {
		if len(l.Touches) > 0 {
			ls = append(ls, l)
		}
	}
	p.Launches = ls
	p.compact()
}

// LaunchModel holds launch profiles by program.
type LaunchModel struct {
	byProgram map[string]*LaunchProfile
	byRan     map[string][]*LaunchProfile
}

// NewLaunchModel returns a model holding ps.
func NewLaunchModel(ps ...*LaunchProfile) *LaunchModel {
	m := &LaunchModel{byProgram: map[string]*LaunchProfile{}, byRan: map[string][]*LaunchProfile{}}
	for _, p := range ps {
		m.Put(p)
	}
	return m
}

// Put adds or replaces the profile of p.Program.Path.
func (m *LaunchModel) Put(p *LaunchProfile) {
	if old := m.byProgram[p.Program.Path]; old != nil {
		m.Remove(old.Program.Path)
	}
	m.byProgram[p.Program.Path] = p
	if p.Ran.Path != "" {
		m.byRan[p.Ran.Path] = append(m.byRan[p.Ran.Path], p)
	}
}

// Remove forgets the profile of program.
func (m *LaunchModel) Remove(program string) {
	p := m.byProgram[program]
	if p == nil {
		return
	}
	delete(m.byProgram, program)
	if rs := m.byRan[p.Ran.Path]; len(rs) > 0 {
		rs = slices.DeleteFunc(rs, func(q *LaunchProfile) bool { return q == p })
		if len(rs) == 0 {
			delete(m.byRan, p.Ran.Path)
		} else {
			m.byRan[p.Ran.Path] = rs
		}
	}
}

// Get returns the profile of program, or nil.
func (m *LaunchModel) Get(program string) *LaunchProfile {
	if m == nil {
		return nil
	}
	return m.byProgram[program]
}

// Len is the number of profiles.
func (m *LaunchModel) Len() int { return len(m.byProgram) }

// Profiles returns the profiles sorted by program path.
func (m *LaunchModel) Profiles() []*LaunchProfile {
	out := make([]*LaunchProfile, 0, len(m.byProgram))
	for _, p := range m.byProgram {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *LaunchProfile) int { return cmp.Compare(a.Program.Path, b.Program.Path) })
	return out
}

// Find returns the profile of an exec: the one of program when given,
// else the one of the executed file's path, else the only profile whose
// Ran is that file.
func (m *LaunchModel) Find(program, ran string) *LaunchProfile {
	if m == nil {
		return nil
	}
	if p := m.byProgram[program]; p != nil && program != "" {
		return p
	}
	if ran == "" {
		return nil
	}
	if p := m.byProgram[ran]; p != nil {
		return p
	}
	if rs := m.byRan[ran]; len(rs) == 1 {
		return rs[0]
	}
	return nil
}

// launchPolicy prefetches a launch profile on ProcessExec.
type launchPolicy struct {
	env      Env
	model    *LaunchModel
	pages    uint64
	maxFiles int
	minSeen  int
	meta     bool
	chunk    uint32 // pages per request at most
	seqLimit uint64 // a file read front to back with more pages gets no pages (its metadata only)
	fired    map[launchFire]struct{}
	req      Request
	ranges   []Range
}

type launchFire struct {
	p   *LaunchProfile
	pid uint32
}

// maxFired bounds the (profile, pid) pairs remembered; past it they are
// forgotten (a pid re-executing the same program later prefetches again).
const maxFired = 4096

var errNoLaunchModel = errors.New("build policy \"launch\": no launch profiles; learn them with `predictio run --profile DIR -- COMMAND` (or the daemon) and pass launch:profile=DIR")

func buildLaunch(a *args, env Env) (Policy, error) {
	p := &launchPolicy{
		env:      env,
		pages:    a.uint("pages", 1, 1<<40),
		maxFiles: int(a.uint("files", 1, MaxLaunchFiles)),
		minSeen:  int(a.uint("seen", 1, MaxLaunches)),
		meta:     a.choice("meta", "on", "off") == "on",
		chunk:    uint32(a.uint("chunk", 1, 1<<20)),
		seqLimit: a.uint("seqlimit", 0, 1<<40),
		fired:    map[launchFire]struct{}{},
	}
	if a.err != nil {
		return nil, a.err
	}
	switch path := a.vals["profile"]; {
	case path != "":
		m, err := LoadLaunchModel(path)
		if err != nil {
			return nil, fmt.Errorf("build policy \"launch\": %w", err)
		}
		p.model = m
	case env.Launch != nil:
		p.model = env.Launch
	default:
		return nil, errNoLaunchModel
	}
	if env.LaunchFile == nil {
		return nil, errors.New("build policy \"launch\": no way to name a profile's files (Env.LaunchFile); this command cannot run the launch policy")
	}
	return p, nil
}

func (p *launchPolicy) Accepts(k EventKind) bool { return k == EventProcessExec }

// Handle prefetches the profile of the exec'd program, once per process
// and profile: every file of its plan in first-access order (files seen
// in fewer than seen launches are skipped), at most files files and pages
// pages. Each file's first request carries Meta (with meta=on).
func (p *launchPolicy) Handle(ev *Event, emit Emit) {
	ran := ""
	if p.env.FileKey != nil {
		if k, ok := p.env.FileKey(ev.File); ok {
			ran = k.Path
		}
	}
	prof := p.model.Find(ev.Exec.Path, ran)
	if prof == nil {
		return
	}
	fk := launchFire{prof, ev.PID}
	if _, done := p.fired[fk]; done {
		return
	}
	if len(p.fired) >= maxFired {
		clear(p.fired)
	}
	p.fired[fk] = struct{}{}
	budget := p.pages
	files := 0
	maxN := uint64(p.chunk)
	plan := prof.Plan()
	for i := range plan {
		st := plan[i]
		if files >= p.maxFiles || budget == 0 {
			break
		}
		if st.Seen < p.minSeen {
			continue
		}
		id, ok := p.env.LaunchFile(ev.PID, &st)
		if !ok {
			continue
		}
		files++
		eof := p.env.eof(id)
		p.ranges = p.ranges[:0]
		// A large file read front to back is left to the kernel's
		// readahead, which keeps ahead of such a reader once it has
		// started: prefetching it, even its first chunk, only competes
		// with the program's other reads (a sqlite3 query of a 60 MiB
		// table, 2026-12-07: +5-7% with its first 8 MiB, -5-6% without).
		limit := budget
		if st.Sequential && p.seqLimit > 0 && rangePages(st.Ranges) > p.seqLimit {
			limit = 0
		}
		used := uint64(0)
		for _, r := range st.Ranges {
			if budget == 0 || used >= limit {
				break
			}
			first, n := r.First, uint64(r.N)
			if eof > 0 {
				if first >= eof {
					break
				}
				n = min(n, eof-first)
			}
			n = min(n, budget, limit-used)
			budget -= n
			used += n
			for n > 0 {
				c := min(n, maxN)
				p.ranges = append(p.ranges, Range{First: first, N: uint32(c)})
				first, n = first+c, n-c
			}
		}
		p.emitFile(id, emit)
	}
}

func rangePages(rs []Range) uint64 {
	var n uint64
	for _, r := range rs {
		n += uint64(r.N)
	}
	return n
}

// emitFile emits p.ranges of file id as requests of at most chunk pages
// each; the first carries Meta.
func (p *launchPolicy) emitFile(id uint32, emit Emit) {
	maxN := p.chunk
	meta := p.meta
	rs := p.ranges
	if len(rs) == 0 {
		if meta {
			p.req = Request{File: id, Meta: true}
			emit(&p.req)
		}
		return
	}
	for len(rs) > 0 {
		var n uint32
		k := 0
		for k < len(rs) && n+rs[k].N <= maxN {
			n += rs[k].N
			k++
		}
		k = max(k, 1)
		p.req = Request{File: id, Ranges: rs[:k], Meta: meta}
		emit(&p.req)
		meta = false
		rs = rs[k:]
	}
}

// LaunchRecorder learns one launch from its events: for each file, when
// the launch first touched it and which pages its demand accesses (reads,
// faults, fault-around mappings) covered. Exec events and metadata
// accesses (open, stat, readdir, mmap rows of format 1.1) touch a file
// without pages. It keeps at most MaxLaunchFiles files and
// MaxLaunchRanges ranges; Dropped counts what did not fit.
type LaunchRecorder struct {
	start   uint64
	idx     map[uint32]int
	touches []recTouch
	ranges  int
	// Dropped counts accesses not recorded because a bound was reached.
	Dropped uint64
}

type recTouch struct {
	id     uint32
	first  uint64
	kinds  uint32
	ranges []Range
}

// NewLaunchRecorder returns a recorder for a launch that began at startNS
// (CLOCK_MONOTONIC, the clock of events).
func NewLaunchRecorder(startNS uint64) *LaunchRecorder {
	return &LaunchRecorder{start: startNS, idx: map[uint32]int{}}
}

// Files returns the number of files touched so far.
func (r *LaunchRecorder) Files() int { return len(r.touches) }

// Observe records ev: a FileAccess (its demand pages, or a touch for a
// metadata kind) or a ProcessExec (a touch of the executable). Other
// events are ignored.
func (r *LaunchRecorder) Observe(ev *Event) {
	var first uint64
	var n uint64
	kind := formats.KindExec
	switch ev.Kind {
	case EventProcessExec:
	case EventFileAccess:
		a := &ev.Access
		kind = a.Kind
		switch {
		case IsDemand(a.Kind):
			first, n = a.Page, uint64(max(a.NPages, 1))
		case a.Kind >= formats.KindOpen && a.Kind <= formats.KindMmap:
		default:
			return
		}
	default:
		return
	}
	if ev.File == 0 {
		return
	}
	i, ok := r.idx[ev.File]
	if !ok {
		if len(r.touches) >= MaxLaunchFiles {
			r.Dropped++
			return
		}
		i = len(r.touches)
		r.idx[ev.File] = i
		var at uint64
		if ev.TS > r.start {
			at = ev.TS - r.start
		}
		r.touches = append(r.touches, recTouch{id: ev.File, first: at})
	}
	t := &r.touches[i]
	t.kinds |= 1 << kind
	if n == 0 || first >= maxLaunchPage {
		return
	}
	n = min(n, maxLaunchPage-first, math.MaxUint32)
	if k := len(t.ranges); k > 0 {
		// Continuing the previous access (the next pages, or within its
		// last page) leaves the file's page sequence as it is.
		last := &t.ranges[k-1]
		end := last.First + uint64(last.N)
		if first+1 >= end && first <= end {
			if e := max(end, first+n); e-last.First <= math.MaxUint32 {
				last.N = uint32(e - last.First)
				return
			}
		}
	}
	if r.ranges >= MaxLaunchRanges {
		r.Dropped++
		return
	}
	r.ranges++
	t.ranges = append(t.ranges, Range{First: first, N: uint32(n)})
}

// MarkStructured marks the files the launch touched for which structured
// reports true (a structure adapter recognized them) with
// TouchStructured. It is called once, when the launch ends.
func (r *LaunchRecorder) MarkStructured(structured func(id uint32) bool) {
	for i := range r.touches {
		if structured(r.touches[i].id) {
			r.touches[i].kinds |= TouchStructured
		}
	}
}

// Launch returns the recorded launch and its files. resolve gives each
// file id's path and identity; files it does not know (no path, not a
// regular file) are left out.
func (r *LaunchRecorder) Launch(resolve func(id uint32) (LaunchFile, bool), startUnixNS int64, wallNS uint64) (Launch, []LaunchFile) {
	l := Launch{StartUnixNS: startUnixNS, WallNS: wallNS}
	var files []LaunchFile
	for _, t := range r.touches {
		f, ok := resolve(t.id)
		if !ok || f.Path == "" || !filepath.IsAbs(f.Path) || len(f.Path) > maxLaunchPath {
			continue
		}
		l.Touches = append(l.Touches, LaunchTouch{File: uint32(len(files)), FirstNS: t.first, Kinds: t.kinds, Ranges: slices.Clone(t.ranges)})
		files = append(files, f)
	}
	return l, files
}

// BundleLaunchFiles returns an Env.LaunchFile over a bundle's files, for
// scoring the launch policy offline (simulate, replay): a profile's file
// is the bundle's file of the same path and, for a regular file, the same
// size and mtime (a file that changed since the profile was learned is
// skipped, as the live runtime skips it).
func BundleLaunchFiles(files []formats.File) func(pid uint32, s *LaunchStep) (uint32, bool) {
	byPath := make(map[string]*formats.File, len(files))
	for i := range files {
		if files[i].Path != "" {
			byPath[files[i].Path] = &files[i]
		}
	}
	return func(_ uint32, s *LaunchStep) (uint32, bool) {
		f := byPath[s.File.Path]
		if f == nil {
			return 0, false
		}
		if !s.File.PathOnly() && !s.File.IsDir() && (f.Size != s.File.Size || f.MtimeNS != s.File.MtimeNS) {
			return 0, false
		}
		return f.ID, true
	}
}

// Newest returns when the newest launch began (zero without launches).
func (p *LaunchProfile) Newest() time.Time {
	var t int64
	for _, l := range p.Launches {
		t = max(t, l.StartUnixNS)
	}
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, t)
}

// Wants reports whether the next launch should be learned: when the
// profile holds fewer than keep launches, or its newest launch is older
// than refresh (refresh 0: every launch; negative: never once full).
func (p *LaunchProfile) Wants(keep int, refresh time.Duration, now time.Time) bool {
	if p == nil || len(p.Launches) < keep {
		return true
	}
	if refresh < 0 {
		return false
	}
	return !now.Before(p.Newest().Add(refresh))
}

// InvalidateFiles drops from p the files of changed that it holds with
// the same identity (they changed since they were learned), and then its
// oldest launch, so that the next launch is learned (Wants). It reports
// whether it dropped anything.
func (p *LaunchProfile) InvalidateFiles(changed []LaunchFile) bool {
	dropped := false
	for _, c := range changed {
		for i := range p.Files {
			if p.Files[i].Same(&c) {
				p.Invalidate(uint32(i))
				dropped = true
				break
			}
		}
	}
	if dropped && len(p.Launches) > 0 {
		p.Launches = slices.Delete(p.Launches, 0, 1)
		p.compact()
	}
	return dropped
}
