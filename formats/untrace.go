package formats

import (
	"math"
	"sort"
)

// Untracer takes the recorder's own cost out of a recording's think times
// (format 1.2): a row's tracer_ns plus its tracer_calls times the
// manifest's recording.syscall_cost_ns is the recorder's time in the think
// time before the row, so the row starts that much earlier, and so do all
// of its thread's later rows. Service times (end_ns − ts_ns) are
// unchanged. replay --untraced and simulate --untraced share it.
//
// A consumer that times system calls of its own (replay) also pays, per
// system call row, its own way into and out of the kernel, which the
// recorded think time already holds (ts_ns is taken inside the kernel,
// end_ns before the return): ownNS takes that out of each system call row
// too. simulate, which pays nothing, passes 0.
type Untracer struct {
	callNS float64
	ownNS  uint64
	// steps holds, per thread, the recorded times at which its shift (the
	// cost so far) grew and the shift from then on: the last is the
	// thread's shift now, the others are for its hints.
	steps map[uint32][]shiftStep
	total uint64
	own   uint64
}

type shiftStep struct{ ts, shift uint64 }

// NewUntracer returns an Untracer for a bundle whose manifest has
// recording.syscall_cost_ns callNS; ownNS is the consumer's own cost per
// system call row (see Untracer).
func NewUntracer(callNS float64, ownNS uint64) *Untracer {
	if callNS < 0 || math.IsNaN(callNS) || math.IsInf(callNS, 0) {
		callNS = 0
	}
	return &Untracer{callNS: callNS, ownNS: ownNS, steps: map[uint32][]shiftStep{}}
}

// Row shifts a, an accesses.arrow row; rows must come in file order.
func (u *Untracer) Row(a *Access) {
	st := u.steps[a.TID]
	var s uint64
	if len(st) > 0 {
		s = st[len(st)-1].shift
	}
	c := uint64(a.TracerNS) + uint64(float64(a.TracerCalls)*u.callNS)
	u.total += c
	if a.TracerCalls > 0 { // a system call row
		c += u.ownNS
		u.own += u.ownNS
	}
	if c > 0 {
		s += c
		u.steps[a.TID] = append(st, shiftStep{a.TS, s})
	}
	if s == 0 {
		return
	}
	a.TS = subSat(a.TS, s)
	if a.EndNS != 0 {
		a.EndNS = max(subSat(a.EndNS, s), a.TS)
	}
}

// At returns recorded time ts of thread tid (a hint's) on the untraced
// time base: shifted as the thread's row at or before ts was. Call it
// after every row has gone through Row.
func (u *Untracer) At(tid uint32, ts uint64) uint64 {
	st := u.steps[tid]
	i := sort.Search(len(st), func(i int) bool { return st[i].ts > ts })
	if i == 0 {
		return ts
	}
	return subSat(ts, st[i-1].shift)
}

// Total returns the recorder's cost taken out so far, summed over threads.
func (u *Untracer) Total() uint64 { return u.total }

// Own returns the consumer's own cost (ownNS per system call row) taken
// out so far.
func (u *Untracer) Own() uint64 { return u.own }

func subSat(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
