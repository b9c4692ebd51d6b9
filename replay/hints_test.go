package replay

import (
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

// threadHintTrace is one thread reading n scattered pages thinkNS apart,
// each read announced by a tree hint of the same process naming its page
// leadNS before it.
func threadHintTrace(n int, thinkNS, leadNS uint64) *trace {
	seen := map[uint64]bool{}
	var runs [][2]uint64
	for _, r := range sparseRuns(8192, 4*n, 11) {
		if !seen[r[0]] && len(runs) < n {
			seen[r[0]] = true
			runs = append(runs, r)
		}
	}
	t := memTrace(8192, runs, thinkNS)
	th := t.threads[0]
	for _, o := range th.ops {
		t.hints = append(t.hints, formats.Hint{TS: o.ts - leadNS, PID: th.pid, Kind: formats.HintTreeChildEnter, FileID: 7, Children: []uint64{o.page}})
	}
	t.t0 = t.hints[0].TS
	t.assignHints()
	return t
}

// globalHintTrace is n threads of n processes, each reading one scattered
// page thinkNS after the previous one, and a hint from another process
// naming each page leadNS before its read: those hints go on the replay
// clock.
func globalHintTrace(n int, thinkNS, leadNS uint64) *trace {
	t := memTrace(8192, nil, 0)
	t.threads = nil
	seen := map[uint64]bool{}
	ts := uint64(10_000_000)
	for _, r := range sparseRuns(8192, 4*n, 12) {
		if seen[r[0]] || len(t.threads) == n {
			continue
		}
		seen[r[0]] = true
		id := uint32(1000 + len(t.threads))
		t.threads = append(t.threads, &thread{tid: id, pid: id, ops: []op{{ts: ts, page: r[0], n: 1, kind: formats.KindRead}}})
		t.hints = append(t.hints, formats.Hint{TS: ts - leadNS, PID: 999, Kind: formats.HintTreeChildEnter, FileID: 7, Children: []uint64{r[0]}})
		t.ops++
		t.pages++
		ts += thinkNS
	}
	t.firstTS = t.threads[0].ops[0].ts
	t.t0 = t.hints[0].TS
	t.assignHints()
	return t
}

// TestHintsAtTheirTime: a thread's hints are delivered on its own
// timeline, so the recorded lead before the access they announce is kept:
// with 5 µs the tree policy's prefetches cannot be read before their
// demand (late, or the demand reads the page itself); with a lead longer
// than a read they are used in time. Delivered early, as replay did
// before (right after the previous access, 1 ms before), both would be in
// time.
func TestHintsAtTheirTime(t *testing.T) {
	used := map[time.Duration]int{}
	const n = 150
	for _, lead := range []time.Duration{5 * time.Microsecond, 600 * time.Microsecond} {
		tr := threadHintTrace(n, uint64(time.Millisecond), uint64(lead))
		if len(tr.global) != 0 || len(tr.threads[0].hints) != n {
			t.Fatalf("hints not given to their thread: %d global, %d the thread's", len(tr.global), len(tr.threads[0].hints))
		}
		root := materialized(t, tr)
		rep := replayMem(t, tr, Options{Root: root, Backend: BackendDirect, Timing: TimingRecorded, CachePages: 16384, Runs: []string{"tree"}})
		r := rep.Runs[0]
		t.Logf("lead %v: %d hints delivered, %v; misses %d", lead, r.Hints, r.Counts, r.DemandMisses)
		if r.Hints != n {
			t.Fatalf("lead %v: delivered %d of %d hints", lead, r.Hints, n)
		}
		if err := r.Counts.Check(); err != nil {
			t.Error(err)
		}
		used[lead] = int(r.UsedInTime)
	}
	short, long := used[5*time.Microsecond], used[600*time.Microsecond]
	if short > n/5 || long < n/3 || long < 3*short {
		t.Fatalf("hinted pages used in time: %d with a 5 µs lead, %d with 600 µs; want at most %d, at least %d and three times as many", short, long, n/5, n/3)
	}
}

// TestGlobalHintsNeverEarly: hints that no replayed thread sent are
// delivered on the replay clock at their recorded time, never before it.
func TestGlobalHintsNeverEarly(t *testing.T) {
	tr := globalHintTrace(30, uint64(time.Millisecond), uint64(5*time.Microsecond))
	if len(tr.global) != 30 {
		t.Fatalf("%d hints on the replay clock, want 30", len(tr.global))
	}
	root := materialized(t, tr)
	var early []time.Duration
	opt := Options{Root: root, Backend: BackendDirect, Timing: TimingRecorded, CachePages: 16384, Runs: []string{"tree"}}
	opt.onHint = func(st *runState, h *formats.Hint) {
		if d := time.Until(st.at(h.TS)); d > 0 {
			early = append(early, d)
		}
	}
	rep := replayMem(t, tr, opt)
	if r := rep.Runs[0]; r.Hints != 30 {
		t.Fatalf("delivered %d of 30 hints", r.Hints)
	}
	if len(early) > 0 {
		t.Fatalf("%d hints delivered early, by %v", len(early), early)
	}
}
