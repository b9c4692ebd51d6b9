package replay

import (
	"math"
	"runtime"
	"sort"
	"syscall"
	"time"

	"github.com/predictio/predictio/formats"
)

// untracer moves each thread's rows earlier by the recorder's cost in the
// thread so far (Options.Untraced): a row's tracer_ns plus its
// tracer_calls times the manifest's syscall_cost_ns is the recorder's time
// in the think time before it, so the row starts that much earlier, and
// so do all the thread's later rows. Service times (end_ns − ts_ns) are
// unchanged: replay does the operations themselves.
//
// A system call row's think time also holds the program's own way into
// and out of the kernel (its ts_ns is taken inside the kernel, its end_ns
// before the return), which replay, timing its own call from user space,
// pays again: ownNS (ownCallNS, measured where replay runs) is taken out
// of it too.
type untracer struct {
	callNS float64
	ownNS  uint64
	// steps holds, per thread, the recorded times at which its shift (the
	// cost so far) grew and the shift from then on: the last is the
	// thread's shift now, the others are for its hints.
	steps map[uint32][]shiftStep
	total uint64 // the recorder's cost taken out
	own   uint64 // replay's own calls' cost taken out
}

type shiftStep struct{ ts, shift uint64 }

func newUntracer(callNS float64, ownNS uint64) *untracer {
	if callNS < 0 || math.IsNaN(callNS) || math.IsInf(callNS, 0) {
		callNS = 0
	}
	return &untracer{callNS: callNS, ownNS: ownNS, steps: map[uint32][]shiftStep{}}
}

// row shifts a, an accesses.arrow row in file order.
func (u *untracer) row(a *formats.Access) {
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

// ownCall is ownCallNS; tests replace it.
var ownCall = ownCallNS

// ownCallNS returns what replay's own timed system call costs beyond the
// kernel's work in it, in ns: a getppid through Go's system call path
// between two clock reads, as replay times an operation; the least of 3
// rounds of 1000.
func ownCallNS() uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := int64(math.MaxInt64)
	for range 3 {
		t0 := time.Now()
		for range 1000 {
			a := time.Now()
			syscall.Syscall(syscall.SYS_GETPPID, 0, 0, 0)
			_ = time.Since(a)
		}
		best = min(best, time.Since(t0).Nanoseconds()/1000)
	}
	return uint64(best)
}
