package replay

import (
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
)

// TestUntracedShift: with Untraced, each row of a thread moves earlier by
// the recorder's cost in the thread so far (tracer_ns plus tracer_calls ×
// syscall_cost_ns, and replay's own system call, 700 ns here, for a row of
// a system call), so the think time before a row shrinks by the row's own
// cost and its service time stays; another thread keeps its times,
// a thread's hint moves with its rows, and the recorded wall is the span
// of the moved rows. Without Untraced nothing moves, and a bundle with no
// recorder cost is refused with --untraced.
func TestUntracedShift(t *testing.T) {
	defer func(f func() uint64) { ownCall = f }(ownCall)
	ownCall = func() uint64 { return 700 }
	var rows []formats.Access
	row := func(ts, end uint64, tid uint32, page uint64, tracer, calls uint32) {
		rows = append(rows, formats.Access{TS: ts, EndNS: end, FileID: 1, FirstPage: page, NPages: 1, Kind: formats.KindRead,
			Op: ts, PID: 3, TID: tid, TracerNS: tracer, TracerCalls: calls})
	}
	row(1000, 2000, 4, 0, 0, 0)
	row(1500, 2500, 5, 100, 0, 0)
	row(10000, 20000, 4, 1, 3000, 2) // 3000 + 2×500 + 700 taken out before it
	row(30000, 40000, 4, 2, 1000, 1) // 1000 + 500 + 700 more: 6900 in all
	row(50000, 50500, 4, 3, 0, 1)    // 500 + 700 more, though its own tracer_ns is 0: 8100
	row(31000, 41000, 5, 101, 0, 0)
	dir := tracetest.CostBundle(t, 1<<20, rows, []formats.Hint{{TS: 25000, PID: 3, TID: 4, Kind: formats.HintCustom, FileID: 1, Name: "h"}})

	byTID := func(tr *trace) map[uint32]*thread {
		m := map[uint32]*thread{}
		for _, th := range tr.threads {
			m[th.tid] = th
		}
		return m
	}
	tr, err := loadTrace(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	th := byTID(tr)
	var got [][2]uint64
	for _, o := range th[4].ops {
		got = append(got, [2]uint64{o.ts, o.end})
	}
	want := [][2]uint64{{1000, 2000}, {5300, 15300}, {23100, 33100}, {41900, 42400}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Errorf("thread 4's ops (ts, end) = %v, want %v", got, want)
	}
	if o := th[5].ops; len(o) != 2 || o[1].ts != 31000 || o[1].end != 41000 {
		t.Errorf("thread 5's ops moved: %+v", o)
	}
	if h := th[4].hints; len(h) != 1 || h[0].TS != 20300 {
		t.Errorf("thread 4's hint: %+v, want it at 20300 (moved with the row before it)", h)
	}
	if tr.tracerNS != 6000 || tr.ownNS != 2100 {
		t.Errorf("cost taken out: the recorder's %d, replay's own %d; want 6000 and 2100", tr.tracerNS, tr.ownNS)
	}
	if tr.recordedWall != 42400-1000 {
		t.Errorf("recorded wall %d, want %d", tr.recordedWall, 42400-1000)
	}

	plain, err := loadTrace(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if o := byTID(plain)[4].ops; o[2].ts != 30000 || plain.tracerNS != 0 {
		t.Errorf("without Untraced: thread 4's last op at %d, cost %d; want 30000 and 0", o[2].ts, plain.tracerNS)
	}

	old := tracetest.CostBundle(t, 1<<20, []formats.Access{{TS: 1000, EndNS: 2000, FileID: 1, NPages: 1, Kind: formats.KindRead, PID: 3, TID: 4}}, nil)
	if _, err := New(old, Options{Untraced: true, Backend: BackendNone}); err == nil || !strings.Contains(err.Error(), "tracer_ns") {
		t.Errorf("New(--untraced) of a bundle without recorder costs: %v, want an error naming tracer_ns", err)
	}
}

// TestOwnCallNS: replay's own timed system call costs something (a
// getppid through Go's syscall path between two clock reads), and far
// less than a millisecond.
func TestOwnCallNS(t *testing.T) {
	ns := ownCallNS()
	t.Logf("replay's own system call: %d ns", ns)
	if ns == 0 || ns > 1_000_000 {
		t.Fatalf("ownCallNS = %d ns, want a system call's cost", ns)
	}
}
