package trace

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/predictio/predictio/formats"
)

// MergeReport says what Merge wrote.
type MergeReport struct {
	Inputs  int    `json:"inputs"`
	Files   uint64 `json:"files"`
	Unified uint64 `json:"unified"` // input files mapped onto a file of an earlier input
	Events  uint64 `json:"events"`
	Hints   uint64 `json:"hints"`
}

// Merge combines the bundles ins into a new bundle out. Files are
// renumbered; files with the same (dev, ino) (when ino is set) or else the
// same non-empty path become one file (a path-only row, a path that did not
// exist, only with another path-only row). Operation ids (op) are offset
// per input so that they stay unique. Timestamps are kept as they are and
// rows are interleaved in timestamp order (each input must be in timestamp
// order for the output to be). Bundles recorded on different boots or hosts
// have unrelated monotonic clocks; slice them first if that matters. The
// manifest lists the sources in its notes, sums the dropped counters and
// spans the earliest start to the latest end. opts are passed to
// formats.Open (formats.NoVerify).
func Merge(out string, ins []string, opts ...formats.OpenOption) (*MergeReport, error) {
	if len(ins) < 1 {
		return nil, usageErr("merge needs at least one input bundle")
	}
	rep := &MergeReport{Inputs: len(ins)}
	bundles := make([]*formats.Bundle, 0, len(ins))
	defer func() {
		for _, b := range bundles {
			b.Close()
		}
	}()
	for _, in := range ins {
		b, err := openBundle(in, opts)
		if err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		bundles = append(bundles, b)
	}
	w, err := formats.Create(out)
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	fail := func(err error) (*MergeReport, error) {
		w.Abort()
		os.RemoveAll(out)
		return nil, fmt.Errorf("merge: %w", err)
	}

	// Files: remap ids per input.
	type devIno struct{ dev, ino uint64 }
	type pathKey struct {
		path     string
		pathOnly bool
	}
	byDevIno := map[devIno]uint32{}
	byPath := map[pathKey]uint32{}
	remap := make([]map[uint32]uint32, len(bundles))
	var next uint32
	for i, b := range bundles {
		files, err := b.Files()
		if err != nil {
			return fail(fmt.Errorf("%s: %w", ins[i], err))
		}
		remap[i] = make(map[uint32]uint32, len(files))
		for _, f := range files {
			id, found := uint32(0), false
			if f.Ino != 0 {
				id, found = byDevIno[devIno{f.Dev, f.Ino}]
			}
			if !found && f.Path != "" {
				id, found = byPath[pathKey{f.Path, f.PathOnly()}]
			}
			if found {
				remap[i][f.ID] = id
				rep.Unified++
				continue
			}
			id = next
			next++
			remap[i][f.ID] = id
			if f.Ino != 0 {
				byDevIno[devIno{f.Dev, f.Ino}] = id
			}
			if f.Path != "" {
				byPath[pathKey{f.Path, f.PathOnly()}] = id
			}
			f.ID = id
			if err := w.AddFile(f); err != nil {
				return fail(fmt.Errorf("write %s: %w", formats.FilesFile, err))
			}
			rep.Files++
		}
	}

	opBase, err := opOffsets(bundles, ins)
	if err != nil {
		return fail(err)
	}

	// Accesses: k-way merge by timestamp.
	acs := make([]*formats.AccessCursor, len(bundles))
	live := make([]bool, len(bundles))
	for i, b := range bundles {
		c, err := b.Accesses()
		if err != nil {
			return fail(fmt.Errorf("%s: %w", ins[i], err))
		}
		defer c.Close()
		acs[i], live[i] = c, c.Next()
	}
	var a formats.Access
	for {
		best := -1
		for i, c := range acs {
			if live[i] && (best < 0 || c.At().TS < acs[best].At().TS) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		a = *acs[best].At()
		id, ok := remap[best][a.FileID]
		if !ok {
			return fail(fmt.Errorf("%s: %s: access at ts_ns %d: field file_id: %d is not in %s", ins[best], formats.AccessesFile, a.TS, a.FileID, formats.FilesFile))
		}
		a.FileID = id
		if a.Op != 0 {
			a.Op += opBase[best]
		}
		if err := w.Append(&a); err != nil {
			return fail(fmt.Errorf("write %s: %w", formats.AccessesFile, err))
		}
		rep.Events++
		live[best] = acs[best].Next()
	}
	for i, c := range acs {
		if err := c.Err(); err != nil {
			return fail(fmt.Errorf("%s: %w", ins[i], err))
		}
	}

	// Hints: same.
	hcs := make([]*formats.HintCursor, len(bundles))
	for i, b := range bundles {
		c, err := b.Hints()
		if err != nil {
			return fail(fmt.Errorf("%s: %w", ins[i], err))
		}
		defer c.Close()
		hcs[i], live[i] = c, c.Next()
	}
	var h formats.Hint
	for {
		best := -1
		for i, c := range hcs {
			if live[i] && (best < 0 || c.At().TS < hcs[best].At().TS) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		h = *hcs[best].At()
		id, ok := remap[best][h.FileID]
		if !ok {
			return fail(fmt.Errorf("%s: %s: hint at ts_ns %d: field file_id: %d is not in %s", ins[best], formats.HintsFile, h.TS, h.FileID, formats.FilesFile))
		}
		h.FileID = id
		if err := w.AppendHint(&h); err != nil {
			return fail(fmt.Errorf("write %s: %w", formats.HintsFile, err))
		}
		rep.Hints++
		live[best] = hcs[best].Next()
	}
	for i, c := range hcs {
		if err := c.Err(); err != nil {
			return fail(fmt.Errorf("%s: %w", ins[i], err))
		}
	}

	m := w.Manifest()
	copyManifest(m, bundles[0].Manifest())
	m.Notes = nil
	m.ToolVersion = ToolVersion
	m.Recording.Source = "merge"
	for i, b := range bundles {
		src := b.Manifest()
		if i > 0 {
			if src.Start.MonotonicNS < m.Start.MonotonicNS {
				m.Start.MonotonicNS = src.Start.MonotonicNS
			}
			if !src.Start.Wall.IsZero() && (m.Start.Wall.IsZero() || src.Start.Wall.Before(m.Start.Wall)) {
				m.Start.Wall = src.Start.Wall
			}
			if src.End.MonotonicNS > m.End.MonotonicNS {
				m.End.MonotonicNS = src.End.MonotonicNS
			}
			if src.End.Wall.After(m.End.Wall) {
				m.End.Wall = src.End.Wall
			}
			m.Counters.DroppedEvents += src.Counters.DroppedEvents
			m.Counters.RejectedHints += src.Counters.RejectedHints
			m.Counters.DroppedHints += src.Counters.DroppedHints
			m.Filesystems = mergeFilesystems(m.Filesystems, src.Filesystems)
			if src.Host.KernelRelease != m.Host.KernelRelease || src.Host.Hostname != m.Host.Hostname || src.Host.PageSize != m.Host.PageSize {
				m.Notes = append(m.Notes, fmt.Sprintf("source %d was recorded on another host (%s, kernel %s, page size %d); host is that of source 0", i, orDash(src.Host.Hostname), orDash(src.Host.KernelRelease), src.Host.PageSize))
			}
		}
		m.Notes = append(m.Notes, fmt.Sprintf("merged source %d: %s (source %s, %d events, %d hints, %s)", i, ins[i], orDash(src.Recording.Source), src.Counters.Events, src.Counters.Hints, wallOrDash(src.Start.Wall)))
		if b.Integrity() == formats.IntegritySkipped {
			m.Notes = append(m.Notes, noVerifyNote(ins[i]))
		}
		for _, n := range src.Notes {
			m.Notes = append(m.Notes, "source "+strconv.Itoa(i)+": "+n)
		}
	}
	m.Counters.Events, m.Counters.Hints, m.Counters.Files = rep.Events, rep.Hints, rep.Files
	m.Timing = formats.Timing{ServiceTimes: true}
	var adapters []string
	for _, b := range bundles {
		src := b.Manifest()
		m.Timing.ServiceTimes = m.Timing.ServiceTimes && src.Timing.ServiceTimes
		for _, a := range src.Recording.Adapters {
			if !slices.Contains(adapters, a) {
				adapters = append(adapters, a)
			}
		}
	}
	m.Recording.Adapters = adapters
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("merge: close bundle %s: %w", out, err)
	}
	return rep, nil
}

// opOffsets returns, per input, what to add to its operation ids so that
// they stay unique in the merge: the largest op of the inputs before it.
// It reads the op column of inputs that have one (format 1.1).
func opOffsets(bundles []*formats.Bundle, ins []string) ([]uint64, error) {
	out := make([]uint64, len(bundles))
	var base uint64
	for i, b := range bundles {
		out[i] = base
		if ok, err := b.HasColumn(formats.AccessesFile, "op"); err != nil || !ok {
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ins[i], err)
			}
			continue
		}
		var maxOp uint64
		err := forEachAccess(b, func(a *formats.Access) error { maxOp = max(maxOp, a.Op); return nil })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ins[i], err)
		}
		if base+maxOp < base {
			return nil, fmt.Errorf("%s: operation ids overflow 64 bits after offsetting them past those of the inputs before it", ins[i])
		}
		base += maxOp
	}
	return out, nil
}

func wallOrDash(t time.Time) string {
	if t.IsZero() {
		return "no wall clock"
	}
	return "started " + t.UTC().Format(time.RFC3339Nano)
}

func mergeFilesystems(dst, src []formats.Filesystem) []formats.Filesystem {
outer:
	for _, s := range src {
		for _, d := range dst {
			if d.Dev == s.Dev {
				continue outer
			}
		}
		dst = append(dst, s)
	}
	return dst
}

// Bound is one end of a Slice window: either an offset from the bundle
// start or an absolute CLOCK_MONOTONIC timestamp.
type Bound struct {
	Set      bool
	Absolute bool
	NS       uint64
}

// ParseBound parses a --from/--to value: a Go duration ("1.5s", "250ms",
// "2m") is relative to the bundle start; a plain integer is an absolute
// ts_ns. An empty string is an unset bound.
func ParseBound(s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, nil
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return Bound{Set: true, Absolute: true, NS: n}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return Bound{}, usageErr("bad time %q: want a duration from the bundle start like 1.5s or 250ms, or an absolute ts_ns integer", s)
	}
	if d < 0 {
		return Bound{}, usageErr("bad time %q: must not be negative", s)
	}
	return Bound{Set: true, NS: uint64(d)}, nil
}

// SliceReport says what Slice kept.
type SliceReport struct {
	FromNS uint64 `json:"from_ns"` // absolute, inclusive
	ToNS   uint64 `json:"to_ns"`   // absolute, exclusive
	Events uint64 `json:"events"`
	Hints  uint64 `json:"hints"`
}

// Slice copies the accesses and hints of the bundle in with from <= ts_ns
// < to into out. Relative bounds count from the bundle start: the
// manifest's start monotonic time, or the first event when the manifest
// has none (or events precede it). All files are kept, with their ids.
// opts are passed to formats.Open (formats.NoVerify).
func Slice(in, out string, from, to Bound, opts ...formats.OpenOption) (*SliceReport, error) {
	start, err := bundleStart(in, opts)
	if err != nil {
		return nil, fmt.Errorf("slice: %w", err)
	}
	// start is at or before the first access and hint, so an unset --from
	// loses nothing.
	lo, hi := start, uint64(1<<64-1)
	if from.Set {
		lo = from.NS
		if !from.Absolute {
			lo += start
		}
	}
	if to.Set {
		hi = to.NS
		if !to.Absolute {
			hi += start
		}
	}
	if hi <= lo {
		return nil, usageErr("empty window: --to (%d ns) must be after --from (%d ns)", hi, lo)
	}
	rep := &SliceReport{FromNS: lo, ToNS: hi}
	var lastEnd uint64 // of the rows kept: an operation may end after hi
	cc, err := rewrite(in, out, rewriter{
		access: func(a *formats.Access) bool {
			if a.TS >= lo && a.TS < hi {
				lastEnd = max(lastEnd, a.EndNS)
				return true
			}
			return false
		},
		hint: func(h *formats.Hint) bool { return h.TS >= lo && h.TS < hi },
		manifest: func(m *formats.Manifest) {
			if lo > m.Start.MonotonicNS {
				if !m.Start.Wall.IsZero() {
					m.Start.Wall = m.Start.Wall.Add(time.Duration(lo - m.Start.MonotonicNS))
				}
				m.Start.MonotonicNS = lo
			}
			if hi != 1<<64-1 && (m.End.MonotonicNS == 0 || hi < m.End.MonotonicNS) {
				if !m.End.Wall.IsZero() && m.End.MonotonicNS > hi {
					m.End.Wall = m.End.Wall.Add(-time.Duration(m.End.MonotonicNS - hi))
				}
				m.End.MonotonicNS = hi
			}
			if m.End.MonotonicNS != 0 && lastEnd > m.End.MonotonicNS {
				m.End.MonotonicNS = lastEnd
			}
			m.Notes = append(m.Notes, fmt.Sprintf("sliced from %s: ts_ns in [%d, %d); dropped_events is that of the whole source", in, lo, hi))
		},
	}, opts)
	if err != nil {
		return nil, fmt.Errorf("slice: %w", err)
	}
	rep.Events, rep.Hints = cc.Events, cc.Hints
	return rep, nil
}

// bundleStart returns the reference time of relative slice bounds.
func bundleStart(dir string, opts []formats.OpenOption) (uint64, error) {
	b, err := openBundle(dir, opts)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	first, have := uint64(0), false
	peek := func(ts uint64) {
		if !have || ts < first {
			first, have = ts, true
		}
	}
	// formats' errors name the table file and the batch.
	c, err := b.Accesses()
	if err != nil {
		return 0, err
	}
	if c.Next() {
		peek(c.At().TS)
	}
	if err := errors.Join(c.Err(), c.Close()); err != nil {
		return 0, err
	}
	hc, err := b.Hints()
	if err != nil {
		return 0, err
	}
	if hc.Next() {
		peek(hc.At().TS)
	}
	if err := errors.Join(hc.Err(), hc.Close()); err != nil {
		return 0, err
	}
	if s := b.Manifest().Start.MonotonicNS; s != 0 && (!have || s <= first) {
		return s, nil
	}
	return first, nil
}
