package uring

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PollerThread is a kernel SQPOLL thread serving one of a process's rings.
type PollerThread struct {
	TID int
	// CPUTicks is user+system time in clock ticks (USER_HZ, normally 100
	// per second) from /proc/PID/task/TID/stat.
	CPUTicks uint64
}

// PollerThreads lists the SQPOLL threads ("iou-sqp-PID") of process pid
// (0 for this process) with their CPU time. Their CPU time is not part of
// the process's getrusage(RUSAGE_SELF). Linux 5.12 (pollers became
// threads of the owning process).
func PollerThreads(pid int) ([]PollerThread, error) {
	if pid == 0 {
		pid = os.Getpid()
	}
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list poller threads: %w", err)
	}
	var out []PollerThread
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(dir, e.Name(), "comm"))
		if err != nil || !strings.HasPrefix(string(comm), "iou-sqp-") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		// Fields after the parenthesised comm: state is field 3, utime 14, stime 15.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		out = append(out, PollerThread{TID: tid, CPUTicks: ut + st})
	}
	return out, nil
}
