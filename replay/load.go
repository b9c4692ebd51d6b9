// Package replay runs a trace bundle again on a real device, with and without
// a prefetch policy, and measures what the policy is worth end to end.
//
// Demand accesses are re-issued for real: reads as preads of the recorded
// page ranges, faults as touches through an mmap. One worker goroutine per
// recorded thread keeps per-thread order. Each replayed access and each hint
// goes through the policy dispatcher live, and the requests it emits go to a
// Backend: the kernel (readahead into the page cache), the direct engine
// (O_DIRECT into a user-space cache) or none. docs/replay.md describes the
// command and its measurements.
package replay

import (
	"errors"
	"fmt"
	"sort"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// ErrBundle wraps problems with the bundle itself.
var ErrBundle = errors.New("bad bundle")

// op is one operation of a thread to replay: a demand access (the rows of
// one recorded operation merged), or a metadata operation (open, stat,
// readdir, mmap).
type op struct {
	ts    uint64 // the operation's start (bundles with service times) or event time
	end   uint64 // its recorded completion; 0 when the bundle has none
	file  uint32 // index into trace.files
	page  uint64
	n     uint32
	kind  formats.AccessKind
	fault bool
	meta  bool   // a metadata operation, replayed through the path
	ret   int64  // its recorded result (metadata: >= 0 success, else -errno)
	opID  uint64 // the recorded operation (rows of one share it)
	// The mapping behind a fault, map or mmap row: its first file page,
	// length in pages (0: unknown) and formats.Prot* bits.
	mapFirst, mapPages uint64
	prot               uint8
}

// thread is the ordered accesses of one recorded thread, and the hints it
// sent.
type thread struct {
	tid   uint32
	pid   uint32
	ops   []op
	hints []formats.Hint // in timestamp order
}

// fileInfo is one file the replay touches.
type fileInfo struct {
	formats.File
	idx      uint32 // index into trace.files
	maxPage  uint64 // one past the highest page accessed (after clipping)
	accessed bool   // by a demand access or a hint: its data is replayed
	meta     bool   // by a metadata operation: looked up through its path
	opened   bool   // a successful open of it comes before its first access
}

// pages returns the number of pages of the recorded size.
func (f *fileInfo) pages(ps int) uint64 {
	return (f.Size + uint64(ps) - 1) / uint64(ps)
}

// trace is a bundle loaded for replay.
type trace struct {
	dir      string
	man      formats.Manifest
	pageSize int
	files    []*fileInfo
	byID     map[uint32]*fileInfo
	threads  []*thread
	hints    []formats.Hint   // all, in timestamp order
	global   []formats.Hint   // hints no replayed thread sent: delivered on the replay clock
	t0       uint64           // first timestamp, of an access or a hint: the replay clock's origin
	firstTS  uint64           // first access's timestamp
	ops      int              // demand accesses
	pages    uint64           // demand pages
	clipped  uint64           // pages past the recorded end of file, not replayed
	skipped  uint64           // accesses of kinds that are not demand (cache add, readahead, cache delete)
	unknown  uint64           // accesses naming a file id not in files.arrow
	hintSkip uint64           // hints naming a file id not in files.arrow
	execs    uint64           // exec rows: not replayed
	execRows []formats.Access // the first maxExecRows exec rows: the launch policy's triggers
	// metaReads are the first maxMetaReads cache_add rows of block
	// devices: the filesystem metadata the program's lookups read, for the
	// predicted column (replay's own lookups read it for real).
	metaReads []formats.Access
	metaOps   int // metadata operations (open, stat, readdir, mmap)
	// serviceTimes says that access rows carry end_ns (format 1.1);
	// recordedWall is the span of the operations replayed, from the first
	// one's start to the last completion, where the manifest has a
	// timing.recorded_wall_ns (which bundles recorded before 2026-12-06
	// measured over every row, cache adds of metadata blocks included).
	serviceTimes bool
	recordedWall uint64
	// tracerNS is the recorder's cost taken out of the think times with
	// Options.Untraced, summed over threads; 0 without it.
	tracerNS uint64
	// ownNS is replay's own system calls' cost taken out with Untraced.
	ownNS uint64
	// fileOps counts, per file index, the operations on the file (demand
	// and metadata, all threads'): a run retires a file after its last.
	fileOps []int32
}

// demandKind reports whether an access of kind k is re-issued by replay
// (the demand kinds of policies.IsDemand, the same that simulate, train and
// the oracle count), and whether as a touch through an mmap (faults, and
// fault-around mappings, which the program touched without further events).
// Cache adds, readahead decisions and cache deletes are the kernel's work,
// which the replay's own kernel redoes.
func demandKind(k formats.AccessKind) (replay, fault bool) {
	return policies.IsDemand(k), k == formats.KindFault || k == formats.KindMap
}

// loadTrace reads a bundle into memory, grouped by thread.
func loadTrace(dir string, untraced bool) (*trace, error) {
	b, err := formats.Open(dir) // its errors name the bundle
	if err != nil {
		return nil, err
	}
	defer b.Close()
	t := &trace{dir: dir, man: *b.Manifest(), byID: map[uint32]*fileInfo{}}
	t.pageSize = t.man.Host.PageSize
	if t.pageSize == 0 {
		t.pageSize = formats.PageSize()
	}
	if t.pageSize != formats.PageSize() {
		return nil, fmt.Errorf("load bundle %s: %w: manifest.json host.page_size is %d, this machine's is %d", dir, ErrBundle, t.pageSize, formats.PageSize())
	}
	files, err := b.Files()
	if err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	// Rows whose file is missing have no path to replay (issue 17).
	if err := b.CheckReferences(); err != nil {
		return nil, err
	}
	for _, f := range files {
		if _, dup := t.byID[f.ID]; dup {
			return nil, fmt.Errorf("load bundle %s: %w: %s: duplicate file_id %d", dir, ErrBundle, formats.FilesFile, f.ID)
		}
		fi := &fileInfo{File: f, idx: uint32(len(t.files))}
		t.files = append(t.files, fi)
		t.byID[f.ID] = fi
	}

	cur, err := b.Accesses()
	if err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	defer cur.Close()
	t.serviceTimes = b.HasServiceTimes()
	byTID := map[uint32]*thread{}
	var un *formats.Untracer
	if untraced {
		un = formats.NewUntracer(t.man.Recording.SyscallCostNS, ownCall())
	}
	first := true
	for cur.Next() {
		a := cur.At()
		if un != nil {
			un.Row(a)
		}
		if !t.addAccess(a, byTID) {
			continue
		}
		if first || a.TS < t.t0 {
			t.t0 = a.TS
			first = false
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	for _, th := range t.threads {
		// Bundles are written in timestamp order; keep per-thread order
		// stable even when a bundle is not.
		sort.SliceStable(th.ops, func(i, j int) bool { return th.ops[i].ts < th.ops[j].ts })
	}
	sort.Slice(t.threads, func(i, j int) bool { return t.threads[i].tid < t.threads[j].tid })
	t.firstTS = t.t0
	if t.man.Timing.RecordedWallNS != 0 {
		t.recordedWall = t.opsWall()
	}
	t.markOpened()
	t.countFileOps()

	hc, err := b.Hints()
	if err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	defer hc.Close()
	for hc.Next() {
		h := *hc.At()
		if fi := t.byID[h.FileID]; fi != nil {
			fi.accessed = true
		} else if h.Kind == formats.HintTreeChildEnter || h.Kind == formats.HintTensorLayout {
			t.hintSkip++
			continue
		}
		h.Children = append([]uint64(nil), h.Children...)
		t.hints = append(t.hints, h)
	}
	if err := hc.Err(); err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	if un != nil {
		for i := range t.hints {
			t.hints[i].TS = un.At(t.hints[i].TID, t.hints[i].TS)
		}
		t.tracerNS, t.ownNS = un.Total(), un.Own()
	}
	sort.SliceStable(t.hints, func(i, j int) bool { return t.hints[i].TS < t.hints[j].TS })
	if len(t.hints) > 0 && (first || t.hints[0].TS < t.t0) {
		t.t0 = t.hints[0].TS
	}
	t.assignHints()
	if t.ops == 0 {
		return nil, fmt.Errorf("load bundle %s: %w: %s has no demand accesses (read, fault, map or imported) to replay", dir, ErrBundle, formats.AccessesFile)
	}
	return t, nil
}

// used returns the files the replay touches, in files.arrow order.
func (t *trace) used() []*fileInfo {
	var out []*fileInfo
	for _, f := range t.files {
		if f.accessed {
			out = append(out, f)
		}
	}
	return out
}

// future returns the oracle's Future: the replayed demand accesses in
// timestamp order, with bundle file ids.
func (t *trace) future() *policies.Future {
	var all []op
	for _, th := range t.threads {
		all = append(all, th.ops...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].ts < all[j].ts })
	acc := make([]policies.FutureAccess, 0, len(all))
	for _, o := range all {
		if policies.IsDemand(o.kind) {
			acc = append(acc, policies.FutureAccess{File: t.files[o.file].ID, Page: o.page, NPages: o.n})
		}
	}
	return policies.NewFuture(acc)
}

// assignHints gives each hint to the replayed thread that sent it, where
// that is known: the thread of its tid (format 1.1), or else the only
// replayed thread of its process. A thread delivers its hints on its own
// timeline, so the lead between a hint and the access it announces is
// kept exactly; the others go on the replay clock (trace.global).
func (t *trace) assignHints() {
	byTID := map[uint32]*thread{}
	byPID := map[uint32]*thread{}
	shared := map[uint32]bool{}
	for _, th := range t.threads {
		th.hints = th.hints[:0]
		byTID[th.tid] = th
		if _, ok := byPID[th.pid]; ok {
			shared[th.pid] = true
		}
		byPID[th.pid] = th
	}
	t.global = t.global[:0]
	for _, h := range t.hints {
		th := byTID[h.TID]
		if th == nil || h.TID == 0 {
			th = byPID[h.PID]
			if shared[h.PID] {
				th = nil
			}
		}
		if th != nil {
			th.hints = append(th.hints, h)
			continue
		}
		t.global = append(t.global, h)
	}
}

// maxExecRows bounds the exec rows kept for the policies, and
// maxMetaReads the block devices' cache_add rows kept for the prediction.
const (
	maxExecRows  = 4096
	maxMetaReads = 1 << 20
)

// addAccess adds an accesses.arrow row to its thread: a demand access
// (merged into the previous one when both are rows of one recorded
// operation), a metadata operation, or nothing (false) for the kinds that
// are not replayed.
func (t *trace) addAccess(a *formats.Access, byTID map[uint32]*thread) bool {
	meta := a.Kind == formats.KindOpen || a.Kind == formats.KindStat || a.Kind == formats.KindReaddir || a.Kind == formats.KindMmap
	ok, fault := demandKind(a.Kind)
	switch {
	case a.Kind == formats.KindExec:
		t.execs++
		if len(t.execRows) < maxExecRows {
			t.execRows = append(t.execRows, *a)
		}
		return false
	case a.Kind == formats.KindCacheAdd && t.byID[a.FileID] != nil && t.byID[a.FileID].Block():
		if len(t.metaReads) < maxMetaReads {
			t.metaReads = append(t.metaReads, *a)
		}
		return false
	case !ok && !meta:
		t.skipped++
		return false
	}
	fi := t.byID[a.FileID]
	if fi == nil {
		t.unknown++
		return false
	}
	th := byTID[a.TID]
	if th == nil {
		th = &thread{tid: a.TID, pid: a.PID}
		byTID[a.TID] = th
		t.threads = append(t.threads, th)
	}
	o := op{ts: a.TS, end: a.EndNS, file: fi.idx, kind: a.Kind, fault: fault, meta: meta, ret: a.Ret, opID: a.Op,
		mapFirst: a.MapFirstPage, mapPages: a.MapPages, prot: a.Prot}
	if meta {
		o.page, o.n = a.FirstPage, a.NPages
		fi.meta = true
		th.ops = append(th.ops, o)
		t.metaOps++
		return true
	}
	if a.NPages == 0 {
		return false
	}
	ps := uint64(t.pageSize)
	end := a.FirstPage + uint64(a.NPages)
	if lim := (fi.Size + ps - 1) / ps; end > lim {
		if a.FirstPage >= lim {
			t.clipped += uint64(a.NPages)
			return false
		}
		t.clipped += end - lim
		end = lim
	}
	o.page, o.n = a.FirstPage, uint32(end-a.FirstPage)
	if end > fi.maxPage {
		fi.maxPage = end
	}
	fi.accessed = true
	if n := len(th.ops); n > 0 {
		if last := &th.ops[n-1]; !last.meta {
			before := last.n
			if last.merge(&o) {
				t.pages += uint64(last.n) - uint64(before)
				return true
			}
		}
	}
	th.ops = append(th.ops, o)
	t.ops++
	t.pages += uint64(o.n)
	return true
}

// merge folds o into d when both are rows of one recorded operation on one
// file (the batches of one read, a fault and its fault-around, a fault that
// retried): the union of their pages, replayed as one access.
func (d *op) merge(o *op) bool {
	if d.meta || o.opID == 0 || d.opID != o.opID || d.file != o.file || d.fault != o.fault {
		return false
	}
	first, end := min(d.page, o.page), max(d.page+uint64(d.n), o.page+uint64(o.n))
	d.page, d.n = first, uint32(end-first)
	d.end = max(d.end, o.end)
	if d.mapPages == 0 {
		d.mapFirst, d.mapPages, d.prot = o.mapFirst, o.mapPages, o.prot
	}
	if o.kind == formats.KindFault {
		d.kind = formats.KindFault
	}
	return true
}

// opsWall returns the span of the operations loaded: from the first one's
// start (firstTS) to the last completion.
func (t *trace) opsWall() uint64 {
	var last uint64
	for _, th := range t.threads {
		for i := range th.ops {
			last = max(last, th.ops[i].ts, th.ops[i].end)
		}
	}
	if len(t.threads) == 0 || last < t.firstTS {
		return 0
	}
	return last - t.firstTS
}

// markOpened marks the files whose first operation in the recording (by
// any thread) is a successful open: the run opens them when it replays
// that open.
func (t *trace) markOpened() {
	first := map[uint32]*op{}
	for _, th := range t.threads {
		for i := range th.ops {
			o := &th.ops[i]
			if f, ok := first[o.file]; !ok || o.ts < f.ts {
				first[o.file] = o
			}
		}
	}
	for idx, o := range first {
		t.files[idx].opened = o.kind == formats.KindOpen && o.ret >= 0
	}
}

// countFileOps fills fileOps.
func (t *trace) countFileOps() {
	t.fileOps = make([]int32, len(t.files))
	for _, th := range t.threads {
		for i := range th.ops {
			t.fileOps[th.ops[i].file]++
		}
	}
}

// hasFaults reports whether any access is replayed as a fault.
func (t *trace) hasFaults() bool {
	for _, th := range t.threads {
		for i := range th.ops {
			if th.ops[i].fault {
				return true
			}
		}
	}
	return false
}

// access returns the op as a policy event's FileAccess payload.
func (o *op) access() policies.FileAccess {
	return policies.FileAccess{Kind: o.kind, Page: o.page, NPages: o.n, End: o.end,
		Prot: o.prot, MapFirst: o.mapFirst, MapPages: o.mapPages, Op: o.opID}
}
