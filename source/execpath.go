package source

import "sync"

// execPaths remembers the path each process last gave to execve, for
// ExecPath. The exec handler reports it on the opens ring just before the
// exec event.
type execPaths struct {
	mu sync.Mutex
	m  map[uint32]string
}

// maxExecPaths bounds the processes whose exec path is kept; past it the
// table is cleared (a consumer asks right after each exec event).
const maxExecPaths = 1 << 14

// noteExec records the exec path of pid (relative to dfd or its working
// directory), made absolute.
func (s *Source) noteExec(pid uint32, dfd int32, path string) {
	p := s.files.absPath(pid, dfd, path)
	if p == "" {
		return
	}
	e := &s.execs
	e.mu.Lock()
	if e.m == nil || len(e.m) >= maxExecPaths {
		e.m = make(map[uint32]string)
	}
	e.m[pid] = p
	e.mu.Unlock()
}

// ExecPath returns the path process pid gave to its last execve before
// monotonic time ts (an exec event's TS): for a script, the script, where
// the exec event's file is its interpreter. It waits (at most 100 ms)
// until the opens ring has been read up to ts; "" when the path was lost
// (the opens ring was full) or the exec is not known. Needs Config.Exec.
func (s *Source) ExecPath(pid uint32, ts uint64) string {
	s.waitOpens(ts)
	e := &s.execs
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[pid]
}
