package simulate

import (
	"errors"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
	"github.com/predictio/predictio/policies"
)

// untracedBundle writes a bundle of two threads' reads: thread 4 reads
// pages 0..n-1 of file 1 with 10 µs think times, of which tracer µs per
// row after the first are the recorder's (tracer − 1 µs of tracer_ns and
// two calls at the manifest's 500 ns), thread 5 one read at 25 µs.
func untracedBundle(t *testing.T, n int, tracer uint32) string {
	t.Helper()
	var rows []formats.Access
	ts := uint64(1000)
	for i := range n {
		var calls uint32
		tr := uint32(0)
		if i > 0 && tracer > 0 {
			tr, calls = tracer-1000, 2
		}
		rows = append(rows, formats.Access{TS: ts, EndNS: ts + 1000, FileID: 1, FirstPage: uint64(i * 64), NPages: 1, Kind: formats.KindRead,
			Op: ts, PID: 3, TID: 4, TracerNS: tr, TracerCalls: calls})
		if i == 2 {
			rows = append(rows, formats.Access{TS: 25000, EndNS: 26000, FileID: 1, FirstPage: 1 << 12, NPages: 1, Kind: formats.KindRead, Op: 25000, PID: 3, TID: 5})
		}
		ts += 11000
	}
	// A hint of thread 4 between its third and fourth rows.
	hint := formats.Hint{TS: 30000, PID: 3, TID: 4, Kind: formats.HintTreeChildEnter, FileID: 1, Children: []uint64{9}}
	return tracetest.CostBundle(t, 64<<20, rows, []formats.Hint{hint})
}

// TestUntracedEvents checks that simulate --untraced takes the recorder's
// cost out of the think times: each of thread 4's rows moves earlier by
// the cost so far (tracer_ns plus tracer_calls × syscall_cost_ns), its
// service times stay, thread 5's row moves into its new place, and the
// baseline's simulated wall shrinks by the cost on the critical thread.
func TestUntracedEvents(t *testing.T) {
	const n, tracer = 50, 2000
	dir := untracedBundle(t, n, tracer)
	in, err := OpenInput(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	evs, total, err := in.UntracedEvents()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64((n - 1) * tracer); total != want {
		t.Errorf("cost taken out %d ns, want %d", total, want)
	}
	var ts4 []uint64
	var ts5 int
	hintAt, hintAfter := uint64(0), -1
	for i, ev := range evs {
		if i > 0 && ev.TS < evs[i-1].TS {
			t.Fatalf("event %d at %d before event %d at %d", i, ev.TS, i-1, evs[i-1].TS)
		}
		if ev.Kind == policies.EventTreeChildEnter {
			hintAt, hintAfter = ev.TS, len(ts4)
			continue
		}
		if ev.Access.End-ev.TS != 1000 {
			t.Errorf("event %d: service time %d, want 1000", i, ev.Access.End-ev.TS)
		}
		if ev.TID == 5 {
			ts5 = len(ts4)
			continue
		}
		ts4 = append(ts4, ev.TS)
	}
	for i := 1; i < len(ts4); i++ {
		if d := ts4[i] - ts4[i-1]; d != 11000-tracer {
			t.Fatalf("thread 4's rows %d and %d %d ns apart, want %d", i-1, i, d, 11000-tracer)
		}
	}
	// 25 µs: after thread 4's third row (23 µs recorded, 21 µs
	// untraced), before its fourth (34 µs, 30 µs).
	if ts5 != 3 {
		t.Errorf("thread 5's row comes after %d of thread 4's, want 3", ts5)
	}
	// The hint (30 µs recorded) moves with the row before it (23 µs, 4 µs
	// of cost so far): 26 µs, between thread 4's third and fourth rows
	// (19 and 28 µs untraced).
	if hintAt != 26000 || hintAfter != 3 {
		t.Errorf("thread 4's hint at %d ns after %d of its rows, want 26000 and 3", hintAt, hintAfter)
	}

	cfg := Config{PageSize: 4096, CacheBytes: 64 << 20, Device: Device{Name: "t", LatencyNS: 50000, BytesPerSec: 1e9, QueueDepth: 32}, Env: in.Env()}
	run := func(src Source) int64 {
		r, err := Run(cfg, src)
		if err != nil {
			t.Fatal(err)
		}
		return r.Lane(BaselineName).WallNS
	}
	src, err := in.Source()
	if err != nil {
		t.Fatal(err)
	}
	plain := run(src)
	src.Close()
	untraced := run(&SliceSource{Events: evs})
	if d := plain - untraced; d != int64(total) {
		t.Errorf("baseline wall %d ns recorded, %d untraced: %d less, want %d", plain, untraced, d, total)
	}

	noCost, err := OpenInput(untracedBundle(t, 5, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer noCost.Close()
	if _, _, err := noCost.UntracedEvents(); !errors.Is(err, ErrNoTracerCost) {
		t.Errorf("a bundle without the recorder's cost: %v, want ErrNoTracerCost", err)
	}
}
