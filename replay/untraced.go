package replay

import (
	"math"
	"runtime"
	"syscall"
	"time"
)

// ownCall is ownCallNS; tests replace it.
var ownCall = ownCallNS

// ownCallNS returns what replay's own timed system call costs beyond the
// kernel's work in it, in ns: a getppid made as replay makes its calls
// (a raw system call, internal/rawsys) between two clock reads, as replay
// times an operation; the least of 3 rounds of 1000.
func ownCallNS() uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := int64(math.MaxInt64)
	for range 3 {
		t0 := time.Now()
		for range 1000 {
			a := time.Now()
			syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
			_ = time.Since(a)
		}
		best = min(best, time.Since(t0).Nanoseconds()/1000)
	}
	return uint64(best)
}
