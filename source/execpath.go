package source

import "sync"

// execPaths remembers the paths each process last gave to execve, with
// when, for ExecPath. The exec handler reports it on the opens ring just
// before the exec event.
type execPaths struct {
	mu sync.Mutex
	m  map[uint32]*[execsKept]execAt
}

type execAt struct {
	ts   uint64
	path string
}

// A process's last execsKept execs are kept (a shim's chain of execs may
// be read before the consumer asks about its first); at most
// maxExecPaths processes, past which the table is cleared.
const (
	execsKept    = 8
	maxExecPaths = 1 << 14
)

// noteExec records the exec path of pid at ts (relative to dfd or its
// working directory), made absolute.
func (s *Source) noteExec(ts uint64, pid uint32, dfd int32, path string) {
	p := s.files.absPath(pid, dfd, path)
	if p == "" {
		return
	}
	e := &s.execs
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil || len(e.m) >= maxExecPaths {
		e.m = make(map[uint32]*[execsKept]execAt)
	}
	h := e.m[pid]
	if h == nil {
		h = new([execsKept]execAt)
		e.m[pid] = h
	}
	copy(h[1:], h[:execsKept-1])
	h[0] = execAt{ts: ts, path: p}
}

// ExecPath returns the path process pid gave to the execve of the exec
// event at monotonic time ts (its TS): for a script, the script, where
// the exec event's file is its interpreter. It waits (at most 100 ms)
// until the opens ring has been read up to ts; "" when the path was lost
// (the opens ring was full) or the exec is not known. Needs Config.Exec.
func (s *Source) ExecPath(pid uint32, ts uint64) string {
	s.waitOpens(ts)
	e := &s.execs
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.m[pid]
	if h == nil {
		return ""
	}
	for _, x := range h { // newest first
		if x.path != "" && x.ts <= ts {
			return x.path
		}
	}
	return ""
}
