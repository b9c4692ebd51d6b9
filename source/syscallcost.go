package source

import (
	"math"
	"runtime"

	"golang.org/x/sys/unix"
)

// SyscallNS returns the time of one cheap system call (getppid) on the
// calling thread in ns: the least of 5 rounds of 2000 calls, so that a
// preemption in one round does not count. Measured with a source's
// programs attached and again after Close, the difference is what tracing
// adds to every system call of a traced thread beyond what the programs
// time themselves: the kernel's syscall tracing slow path and the
// programs' dispatch (formats.Recording.SyscallCostNS, docs/record.md).
func SyscallNS() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const n = 2000
	best := math.Inf(1)
	for range 5 {
		t0 := monoNow()
		for range n {
			unix.Getppid()
		}
		best = min(best, float64(monoNow()-t0)/n)
	}
	return best
}
