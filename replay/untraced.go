package replay

import (
	"math"
	"sort"

	"github.com/predictio/predictio/formats"
)

// untracer moves each thread's rows earlier by the recorder's cost in the
// thread so far (Options.Untraced): a row's tracer_ns plus its
// tracer_calls times the manifest's syscall_cost_ns is the recorder's time
// in the think time before it, so the row starts that much earlier, and
// so do all the thread's later rows. Service times (end_ns − ts_ns) are
// unchanged: replay does the operations themselves.
type untracer struct {
	callNS float64
	shift  map[uint32]uint64 // per thread, the cost so far
	// steps holds, per thread, the recorded time at which its shift grew
	// and the shift from then on, for the thread's hints.
	steps map[uint32][]shiftStep
	total uint64
}

type shiftStep struct{ ts, shift uint64 }

func newUntracer(callNS float64) *untracer {
	if callNS < 0 || math.IsNaN(callNS) || math.IsInf(callNS, 0) {
		callNS = 0
	}
	return &untracer{callNS: callNS, shift: map[uint32]uint64{}, steps: map[uint32][]shiftStep{}}
}

// row shifts a, an accesses.arrow row in file order.
func (u *untracer) row(a *formats.Access) {
	s := u.shift[a.TID]
	if c := uint64(a.TracerNS) + uint64(float64(a.TracerCalls)*u.callNS); c > 0 {
		s += c
		u.shift[a.TID] = s
		u.steps[a.TID] = append(u.steps[a.TID], shiftStep{a.TS, s})
		u.total += c
	}
	if s == 0 {
		return
	}
	a.TS = subSat(a.TS, s)
	if a.EndNS != 0 {
		a.EndNS = max(subSat(a.EndNS, s), a.TS)
	}
}

// at returns recorded time ts of thread tid (a hint's) on the untraced
// time base: shifted as the thread's row at or before ts was.
func (u *untracer) at(tid uint32, ts uint64) uint64 {
	st := u.steps[tid]
	i := sort.Search(len(st), func(i int) bool { return st[i].ts > ts })
	if i == 0 {
		return ts
	}
	return subSat(ts, st[i-1].shift)
}

func subSat(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
