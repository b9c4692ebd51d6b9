package formats

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand"
	"sort"
	"strings"
	"time"
)

// SynthSpec describes a synthetic bundle. Zero fields take the defaults
// listed in docs/format.md.
type SynthSpec struct {
	// Pattern is "seq" (sequential scan), "stride" (every Stride-th page),
	// "random" (uniform pages), "zipf" (pages of one file drawn with Zipf
	// weights of exponent ZipfS), "sparse" (a recurring sparse sequence
	// that varies a little by Run) or "btree" (key-order range scans in a
	// B-tree with tree_child_enter hints naming the upcoming children).
	Pattern string
	// Events is the number of access rows (default 100000).
	Events int
	// Files is the number of files (default 1).
	Files int
	// FilePages is each file's size in pages (default: Events/Files for
	// seq, so one scan covers every file once; 1048576, 4 GiB, for zipf;
	// 262144, 1 GiB, otherwise). zipf allows at most SynthZipfMaxPages.
	FilePages uint64
	// Stride is the page step of "stride" (default 16) and the fanout of
	// "btree" (default 64).
	Stride uint64
	// Run selects the run of "sparse" and "btree": runs share the sequence
	// of Seed ("sparse": 90% of it) and differ in the rest.
	Run int
	// Seed selects the random sequence.
	Seed int64
	// ZipfS is the exponent s of "zipf" (default 0.9; allowed (0, 10]):
	// the page of rank k (1-based) has weight 1/k^s.
	ZipfS float64
	// ThinkNS is the mean time between accesses (default 2000 ns); each gap
	// adds uniform jitter of up to a quarter of it.
	ThinkNS uint64
	// ServiceNS, when set, gives every access a service time (format 1.1):
	// end_ns = ts_ns + ServiceNS, its own op, ret = the bytes read, and the
	// next access starts ThinkNS after the previous one ends. "launch"
	// always has service times (default 20000 ns).
	ServiceNS uint64
}

// Synth constants, part of the documented output.
const (
	synthStartNS  = 1_000_000_000_000
	synthPID      = 4242
	synthPageSize = 4096
	// synthScatter spreads B-tree nodes over the file (a prime).
	synthScatter = 2654435761
	// synthZipfS is the default exponent of "zipf".
	synthZipfS = 0.9
	// SynthZipfMaxPages bounds FilePages for "zipf": its tables take 12
	// bytes a page (768 MiB at the bound).
	SynthZipfMaxPages = 1 << 26
)

var synthWall = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// SynthPatterns are the patterns Synth writes.
var SynthPatterns = []string{"seq", "stride", "random", "zipf", "sparse", "btree", "launch"}

func (s *SynthSpec) defaults() error {
	if s.Pattern == "" {
		s.Pattern = "seq"
	}
	if s.Events <= 0 {
		s.Events = 100000
	}
	if s.Files <= 0 {
		s.Files = 1
	}
	if s.FilePages == 0 {
		switch s.Pattern {
		case "seq":
			s.FilePages = max(1, uint64((s.Events+s.Files-1)/s.Files))
		case "zipf":
			s.FilePages = 1048576
		default:
			s.FilePages = 262144
		}
	}
	if s.Stride == 0 {
		if s.Pattern == "btree" {
			s.Stride = 64
		} else {
			s.Stride = 16
		}
	}
	if s.ThinkNS == 0 {
		s.ThinkNS = 2000
	}
	switch s.Pattern {
	case "seq", "stride", "random", "sparse", "btree":
	case "zipf":
		if s.ZipfS == 0 {
			s.ZipfS = synthZipfS
		}
		if !(s.ZipfS > 0 && s.ZipfS <= 10) { // NaN fails too
			return fmt.Errorf("synth: zipf exponent (ZipfS, flag --zipf-s) %g is out of range: want more than 0 and at most 10", s.ZipfS)
		}
		if s.Files != 1 {
			return fmt.Errorf("synth: zipf reads one file: Files (flag --files) %d must be 1", s.Files)
		}
		if s.FilePages > SynthZipfMaxPages {
			return fmt.Errorf("synth: zipf FilePages (flag --file-pages) %d is over %d", s.FilePages, SynthZipfMaxPages)
		}
	case "launch":
		if s.ServiceNS == 0 {
			s.ServiceNS = 20000
		}
	default:
		return fmt.Errorf("synth: unknown pattern %q (want one of %s)", s.Pattern, strings.Join(SynthPatterns, ", "))
	}
	if s.Pattern == "btree" && s.Stride < 2 {
		return fmt.Errorf("synth: btree fanout (Stride) %d must be at least 2", s.Stride)
	}
	return nil
}

// Synth writes a deterministic synthetic bundle into dir (which must not
// exist or be empty): the same spec gives byte-identical files on every
// machine. docs/format.md describes each pattern.
func Synth(dir string, spec SynthSpec) error {
	if err := spec.defaults(); err != nil {
		return err
	}
	w, err := Create(dir)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := synthRows(w, spec); err != nil {
		w.Abort()
		return fmt.Errorf("synth: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

func synthRows(w *Writer, s SynthSpec) error {
	m := w.Manifest()
	m.ToolVersion = "predictio formats " + FormatVersion
	m.Host = Host{Hostname: "synth", KernelRelease: "synthetic", CPUs: 1, MemoryBytes: 1 << 30, PageSize: synthPageSize}
	m.Filesystems = []Filesystem{{Dev: 8<<20 | 1, Device: "synthetic", MountPoint: "/synth", FSType: "synthetic", LogicalBlockSize: 512}}
	m.Recording = Recording{Source: "synth", CommandLine: []string{"synth", "--pattern", s.Pattern}, Target: "synthetic", EventSources: []string{"synthetic"}}
	m.Start = Timestamp{Wall: synthWall, MonotonicNS: synthStartNS}
	m.Notes = []string{fmt.Sprintf("synth pattern=%s events=%d files=%d file_pages=%d stride=%d run=%d seed=%d think_ns=%d",
		s.Pattern, s.Events, s.Files, s.FilePages, s.Stride, s.Run, s.Seed, s.ThinkNS)}
	if s.Pattern == "zipf" {
		m.Notes[0] += fmt.Sprintf(" zipf_s=%g", s.ZipfS)
	}
	if s.ServiceNS > 0 {
		m.Notes[0] += fmt.Sprintf(" service_ns=%d", s.ServiceNS)
		m.Timing.ServiceTimes = true
		m.Recording.Kernel = "synthetic"
	}
	if s.Pattern == "launch" {
		return synthLaunch(w, s)
	}

	for i := 0; i < s.Files; i++ {
		err := w.AddFile(File{ID: uint32(i + 1), Dev: 8<<20 | 1, Ino: uint64(1000 + i), Path: fmt.Sprintf("/synth/%s-%03d.dat", s.Pattern, i),
			Size: s.FilePages * synthPageSize, MtimeNS: synthWall.UnixNano()})
		if err != nil {
			return err
		}
	}
	base := rand.New(rand.NewSource(s.Seed))
	run := rand.New(rand.NewSource(s.Seed*1_000_003 + int64(s.Run)*7919 + 1))
	ts := uint64(synthStartNS)
	jitter := max(s.ThinkNS/4, 1)
	tick := func() uint64 {
		ts += s.ThinkNS + uint64(run.Int63n(int64(jitter)))
		return ts
	}
	a := Access{PID: synthPID, TID: synthPID, Comm: "synth-" + s.Pattern, NPages: 1, Kind: KindRead}
	emit := func(file uint32, page uint64) error {
		a.TS = tick()
		a.FileID = file
		a.FirstPage = page
		if s.ServiceNS > 0 {
			a.EndNS, a.Ret = a.TS+s.ServiceNS, synthPageSize
			a.Op++
			ts = a.EndNS
		}
		return w.Append(&a)
	}
	nf := uint64(s.Files)
	switch s.Pattern {
	case "seq":
		for i := uint64(0); i < uint64(s.Events); i++ {
			if err := emit(uint32((i/s.FilePages)%nf)+1, i%s.FilePages); err != nil {
				return err
			}
		}
	case "stride":
		for i := uint64(0); i < uint64(s.Events); i++ {
			p := i * s.Stride
			if err := emit(uint32((p/s.FilePages)%nf)+1, p%s.FilePages); err != nil {
				return err
			}
		}
	case "random":
		for i := 0; i < s.Events; i++ {
			f := uint32(run.Int63n(int64(nf))) + 1
			if err := emit(f, uint64(run.Int63n(int64(s.FilePages)))); err != nil {
				return err
			}
		}
	case "zipf":
		z := newSynthZipf(s.FilePages, s.ZipfS, run)
		for i := 0; i < s.Events; i++ {
			if err := emit(1, z.page(run)); err != nil {
				return err
			}
		}
	case "sparse":
		for i := 0; i < s.Events; i++ {
			f := uint32(base.Int63n(int64(nf))) + 1
			p := uint64(base.Int63n(int64(s.FilePages)))
			if run.Intn(10) == 0 { // 10% of positions differ between runs
				f = uint32(run.Int63n(int64(nf))) + 1
				p = uint64(run.Int63n(int64(s.FilePages)))
			}
			if err := emit(f, p); err != nil {
				return err
			}
		}
	case "btree":
		if err := synthBtree(w, s, run, emit, &ts); err != nil {
			return err
		}
	}
	m.End = Timestamp{Wall: synthWall.Add(time.Duration(ts + 1 - synthStartNS)), MonotonicNS: ts + 1}
	return nil
}

// synthLaunch writes the "launch" pattern: a program start in format 1.1
// terms, repeated until Events rows. Each launch execs /synth/bin/launch;
// opens each of Files libraries, maps it PROT_READ|PROT_EXEC and faults in
// 8 random text pages (a fault, then a fault-around map row of the next 15
// pages, sharing an op); fails to open and stat /synth/etc/launch.conf (a
// path-only file); opens and lists /synth/share; and stats, opens and reads
// /synth/share/data in 16-page reads. Every row has ts_ns (start), end_ns
// = start + ServiceNS (faults 4x), an op and ret.
func synthLaunch(w *Writer, s SynthSpec) error {
	libPages := max(s.FilePages/64, 64)
	const dataPages = 256
	files := []File{
		{ID: 1, Path: "/synth/bin/launch", Size: 64 * synthPageSize, Mode: ModeRegular | 0o755},
		{ID: 2, Path: "/synth/etc/launch.conf"}, // path-only: it does not exist
		{ID: 3, Path: "/synth/share", Mode: ModeDir | 0o755},
		{ID: 4, Path: "/synth/share/data", Size: dataPages * synthPageSize, Mode: ModeRegular | 0o644},
	}
	for i := 0; i < s.Files; i++ {
		files = append(files, File{ID: uint32(5 + i), Path: fmt.Sprintf("/synth/lib/lib%03d.so", i), Size: libPages * synthPageSize, Mode: ModeRegular | 0o644})
	}
	for i := range files {
		f := &files[i]
		if !f.PathOnly() {
			f.Dev, f.Ino, f.MtimeNS = 8<<20|1, uint64(2000+i), synthWall.UnixNano()
		}
		if err := w.AddFile(*f); err != nil {
			return err
		}
	}
	rng := rand.New(rand.NewSource(s.Seed*1_000_003 + int64(s.Run)*7919 + 1))
	ts := uint64(synthStartNS)
	n := 0
	var op uint64
	row := func(a Access, service uint64, sameOp bool) error {
		if n >= s.Events {
			return errSynthDone
		}
		if !sameOp {
			op++
			ts += s.ThinkNS + uint64(rng.Int63n(int64(max(s.ThinkNS/4, 1))))
		}
		a.TS, a.EndNS, a.Op = ts, ts+service, op
		a.PID, a.TID, a.Comm = synthPID, synthPID, "synth-launch"
		ts = a.EndNS
		n++
		return w.Append(&a)
	}
	svc := s.ServiceNS
	fd := int64(3)
	launch := func() error {
		if err := row(Access{Kind: KindExec, FileID: 1}, svc, false); err != nil {
			return err
		}
		for i := 0; i < s.Files; i++ {
			id := uint32(5 + i)
			if err := row(Access{Kind: KindOpen, FileID: id, Ret: fd}, svc/4, false); err != nil {
				return err
			}
			prot := ProtRead | ProtExec
			mm := Access{Kind: KindMmap, FileID: id, NPages: uint32(libPages), Prot: prot, MapPages: libPages, Ret: int64(0x7f0000000000 + uint64(i)<<32)}
			if err := row(mm, svc/4, false); err != nil {
				return err
			}
			for j := 0; j < 8; j++ {
				p := uint64(rng.Int63n(int64(libPages - 16)))
				f := Access{Kind: KindFault, FileID: id, FirstPage: p, NPages: 1, Prot: prot, MapPages: libPages}
				if err := row(f, 4*svc, false); err != nil {
					return err
				}
				m := Access{Kind: KindMap, FileID: id, FirstPage: p + 1, NPages: 15, Prot: prot, MapPages: libPages}
				if err := row(m, svc/8, true); err != nil {
					return err
				}
			}
		}
		for _, a := range []Access{
			{Kind: KindOpen, FileID: 2, Ret: -2}, {Kind: KindStat, FileID: 2, Ret: -2},
			{Kind: KindOpen, FileID: 3, Ret: fd + 1}, {Kind: KindReaddir, FileID: 3, Ret: 4096},
			{Kind: KindStat, FileID: 4}, {Kind: KindOpen, FileID: 4, Ret: fd + 2},
		} {
			if err := row(a, svc/4, false); err != nil {
				return err
			}
		}
		for p := uint64(0); p < dataPages; p += 16 {
			if err := row(Access{Kind: KindRead, FileID: 4, FirstPage: p, NPages: 16, Ret: 16 * synthPageSize}, svc, false); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	for err == nil {
		err = launch()
	}
	if err != errSynthDone {
		return err
	}
	m := w.Manifest()
	m.End = Timestamp{Wall: synthWall.Add(time.Duration(ts + 1 - synthStartNS)), MonotonicNS: ts + 1}
	return nil
}

var errSynthDone = fmt.Errorf("synth: enough rows")

// synthBtree emits key-order range scans in a B-tree of fanout s.Stride
// stored in file 1. Nodes are numbered level by level (root 0, level l's
// nodes after level l-1's, key order within a level) and scattered over
// the file: node g is at page g*M mod FilePages (M = synthScatter, or the
// next number coprime with FilePages), so the root is page 0 and key-order
// neighbours are far apart, as after page splits; readahead sees random
// reads. Each scan starts at a random leaf, descends to it from the root
// and then reads the next leaves in key order, s.Stride leaves in all
// (fewer at the end of the tree), the way a B-tree cursor does: moving to
// the next leaf reads only the nodes below the lowest ancestor the two
// leaves share. Before entering a child it emits a tree_child_enter hint
// naming the parent page, the child's position in the parent and the
// upcoming children: the pages of the parent's children after that
// position, in key order.
func synthBtree(w *Writer, s SynthSpec, rng *rand.Rand, emit func(uint32, uint64) error, ts *uint64) error {
	f := s.Stride
	// levels: sizes 1, f, f^2, ... while the tree fits in FilePages.
	starts := []uint64{0}
	size, total := uint64(1), uint64(1)
	for total+size*f <= s.FilePages && len(starts) < 16 {
		starts = append(starts, total)
		size *= f
		total += size
	}
	depth := len(starts)
	leaves := size
	// span[l]: leaves under one node of level l.
	span := make([]uint64, depth)
	span[depth-1] = 1
	for l := depth - 2; l >= 0; l-- {
		span[l] = span[l+1] * f
	}
	mul := uint64(synthScatter)
	for gcd(mul, s.FilePages) != 1 {
		mul++
	}
	page := func(g uint64) uint64 {
		hi, lo := bits.Mul64(g, mul)
		return bits.Rem64(hi, lo, s.FilePages)
	}
	children := make([]uint64, f)
	h := Hint{PID: synthPID, Kind: HintTreeChildEnter, FileID: 1}
	// enter reads node x of level l (l >= 1) after a hint from its parent.
	enter := func(l int, x uint64) error {
		parent, pos := x/f, x%f
		k := 0
		for c := pos + 1; c < f; c++ {
			children[k] = page(starts[l] + parent*f + c)
			k++
		}
		h.TS = *ts + s.ThinkNS/2
		h.ParentPage = page(starts[l-1] + parent)
		h.Position = uint32(pos)
		h.Children = children[:k]
		if err := w.AppendHint(&h); err != nil {
			return err
		}
		return emit(1, page(starts[l]+x))
	}
	n := 0
	for n < s.Events {
		leaf := uint64(rng.Int63n(int64(leaves)))
		end := min(leaf+f, leaves)
		// the descent: the root, then every level from 1.
		if err := emit(1, page(0)); err != nil {
			return err
		}
		n++
		from := 1
		for ; leaf < end && n < s.Events; leaf++ {
			for l := from; l < depth && n < s.Events; l++ {
				if err := enter(l, leaf/span[l]); err != nil {
					return err
				}
				n++
			}
			// the next leaf shares the ancestors above the first level
			// whose node changes.
			from = 1
			for from < depth-1 && (leaf+1)/span[from] == leaf/span[from] {
				from++
			}
		}
	}
	return nil
}

// synthZipf draws the pages of "zipf": rank k (1-based) of n has weight
// 1/k^s, and the ranks are scattered over the file by a permutation drawn
// from the same generator as the pages. It holds a cumulative weight and a
// page per rank: 12 bytes a page.
type synthZipf struct {
	cdf  []float64 // cdf[k-1]: the weights of ranks 1..k, over the total
	perm []uint32  // perm[k-1]: the page of rank k
}

func newSynthZipf(n uint64, s float64, rng *rand.Rand) *synthZipf {
	z := &synthZipf{cdf: make([]float64, n), perm: make([]uint32, n)}
	sum := 0.0
	for k := range z.cdf {
		sum += 1 / math.Pow(float64(k+1), s)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	for k := range z.perm {
		z.perm[k] = uint32(k)
	}
	// Fisher-Yates.
	for k := len(z.perm) - 1; k > 0; k-- {
		j := rng.Int63n(int64(k) + 1)
		z.perm[k], z.perm[j] = z.perm[j], z.perm[k]
	}
	return z
}

// page draws one page: the rank is the first whose cumulative weight
// exceeds a uniform draw in [0, 1).
func (z *synthZipf) page(rng *rand.Rand) uint64 {
	u := rng.Float64()
	k := sort.Search(len(z.cdf), func(i int) bool { return z.cdf[i] > u })
	if k == len(z.cdf) { // rounding left the last sum just under 1
		k--
	}
	return uint64(z.perm[k])
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
