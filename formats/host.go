package formats

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// PageSize returns the page size of this machine.
func PageSize() int { return os.Getpagesize() }

// KernelDev converts a stat(2) st_dev to the kernel's s_dev encoding
// (major<<20 | minor), the encoding tracepoints report.
func KernelDev(stDev uint64) uint64 {
	return uint64(unix.Major(stDev))<<20 | uint64(unix.Minor(stDev))
}

// KernelDevParts splits an s_dev encoded device number.
func KernelDevParts(dev uint64) (major, minor uint32) {
	return uint32(dev >> 20), uint32(dev & (1<<20 - 1))
}

// HostInfo describes this machine.
func HostInfo() Host {
	h := Host{PageSize: PageSize(), CPUs: runtime.NumCPU()}
	h.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.KernelRelease = unix.ByteSliceToString(u.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		h.MemoryBytes = uint64(si.Totalram) * uint64(si.Unit)
	}
	return h
}
