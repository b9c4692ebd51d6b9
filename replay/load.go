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

// op is one demand access to replay.
type op struct {
	ts    uint64
	file  uint32 // index into trace.files
	page  uint64
	n     uint32
	kind  formats.AccessKind
	fault bool
}

// thread is the ordered accesses of one recorded thread.
type thread struct {
	tid uint32
	pid uint32
	ops []op
}

// fileInfo is one file the replay touches.
type fileInfo struct {
	formats.File
	idx      uint32 // index into trace.files
	maxPage  uint64 // one past the highest page accessed (after clipping)
	accessed bool
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
	hints    []formats.Hint
	t0       uint64 // first timestamp
	ops      int    // demand accesses
	pages    uint64 // demand pages
	clipped  uint64 // pages past the recorded end of file, not replayed
	skipped  uint64 // accesses of kinds that are not demand (cache add, readahead, cache delete)
	unknown  uint64 // accesses naming a file id not in files.arrow
	hintSkip uint64 // hints naming a file id not in files.arrow
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
func loadTrace(dir string) (*trace, error) {
	b, err := formats.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open bundle %s: %w", dir, err)
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
	byTID := map[uint32]*thread{}
	first := true
	ps := uint64(t.pageSize)
	for cur.Next() {
		a := cur.At()
		ok, fault := demandKind(a.Kind)
		if !ok {
			t.skipped++
			continue
		}
		fi := t.byID[a.FileID]
		if fi == nil {
			t.unknown++
			continue
		}
		if a.NPages == 0 {
			continue
		}
		end := a.FirstPage + uint64(a.NPages)
		if lim := (fi.Size + ps - 1) / ps; end > lim {
			if a.FirstPage >= lim {
				t.clipped += uint64(a.NPages)
				continue
			}
			t.clipped += end - lim
			end = lim
		}
		if first || a.TS < t.t0 {
			t.t0 = a.TS
			first = false
		}
		th := byTID[a.TID]
		if th == nil {
			th = &thread{tid: a.TID, pid: a.PID}
			byTID[a.TID] = th
			t.threads = append(t.threads, th)
		}
		th.ops = append(th.ops, op{ts: a.TS, file: fi.idx, page: a.FirstPage, n: uint32(end - a.FirstPage), kind: a.Kind, fault: fault})
		if end > fi.maxPage {
			fi.maxPage = end
		}
		fi.accessed = true
		t.ops++
		t.pages += end - a.FirstPage
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
	sort.SliceStable(t.hints, func(i, j int) bool { return t.hints[i].TS < t.hints[j].TS })
	if len(t.hints) > 0 && (first || t.hints[0].TS < t.t0) {
		t.t0 = t.hints[0].TS
	}
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
