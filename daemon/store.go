package daemon

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/predictio/predictio/live"
	"github.com/predictio/predictio/policies"
)

// store holds the profiles: in memory as the launch policy's model, on
// disk one file per program, written by one saver goroutine in the order
// they change. Its methods are called with the daemon's lock held.
type store struct {
	dir      string
	maxBytes int
	max      int
	model    *policies.LaunchModel
	used     map[string]time.Time // last launch per program, for eviction
	saves    chan saveJob
	done     chan struct{}
	log      *slog.Logger
	bytes    map[string]int // encoded size per program
	failures int
	pending  sync.WaitGroup // queued saves not written yet
	// followed are the programs whose learned launches read a file an
	// adapter recognized (followedFile); their launches are followed.
	followed map[string]bool
}

// followedFile lists the followed programs, one path a line.
const followedFile = "followed.list"

// maxFollowed bounds the followed programs (the least recently added
// go first).
const maxFollowed = 4096

type saveJob struct {
	program string
	b       []byte // nil: remove the profile
	file    string // instead of a profile, the file of dir to write (followedFile)
}

// openStore loads every profile of dir (at most max; a damaged one is
// logged and removed) and starts the saver.
func openStore(dir string, max, maxBytes int, log *slog.Logger) (*store, error) {
	if err := live.OpenProfileDir(dir); err != nil {
		return nil, err
	}
	live.RemoveStaleTemps(dir)
	s := &store{dir: dir, max: max, maxBytes: maxBytes, model: policies.NewLaunchModel(), used: map[string]time.Time{},
		saves: make(chan saveJob, 1024), done: make(chan struct{}), log: log, bytes: map[string]int{}, followed: map[string]bool{}}
	s.load()
	s.loadFollowed()
	go s.saver()
	return s, nil
}

// load reads the profiles of the directory, newest first, up to max.
func (s *store) load() {
	names, _ := filepath.Glob(filepath.Join(s.dir, "*"+policies.LaunchProfileExt))
	type prof struct {
		p  *policies.LaunchProfile
		at time.Time
		n  int
	}
	var ps []prof
	for _, n := range names {
		st, err := os.Stat(n)
		if err != nil {
			continue
		}
		p, err := policies.ReadLaunchProfile(n)
		if err != nil {
			s.log.Warn("removing a damaged profile", "file", n, "err", err)
			os.Remove(n)
			continue
		}
		if filepath.Base(n) != policies.LaunchProfileName(p.Program.Path) {
			s.log.Warn("ignoring a profile under another name", "file", n, "program", p.Program.Path)
			continue
		}
		ps = append(ps, prof{p, st.ModTime(), int(st.Size())})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].at.After(ps[j].at) })
	for i, p := range ps {
		if i >= s.max {
			s.log.Info("over max_profiles: removing", "program", p.p.Program.Path)
			os.Remove(live.ProfilePath(s.dir, p.p.Program.Path))
			continue
		}
		s.model.Put(p.p)
		s.used[p.p.Program.Path] = p.at
		s.bytes[p.p.Program.Path] = p.n
	}
}

// reload re-reads the directory (SIGHUP): profiles removed by hand go,
// new ones come.
func (s *store) reload() {
	s.flush()
	for _, p := range s.model.Profiles() {
		s.model.Remove(p.Program.Path)
	}
	clear(s.used)
	clear(s.bytes)
	s.load()
}

// get returns program's profile, or nil.
func (s *store) get(program string) *policies.LaunchProfile { return s.model.Get(program) }

// put stores p (new or changed) and queues its save; past max profiles
// the least recently launched ones are removed.
func (s *store) put(p *policies.LaunchProfile) {
	s.model.Put(p)
	s.used[p.Program.Path] = time.Now()
	b := live.EncodeProfile(p, s.maxBytes)
	s.bytes[p.Program.Path] = len(b)
	s.queue(saveJob{program: p.Program.Path, b: b})
	for s.model.Len() > s.max {
		oldest, at := "", time.Time{}
		for prog, t := range s.used {
			if oldest == "" || t.Before(at) {
				oldest, at = prog, t
			}
		}
		s.log.Info("over max_profiles: removing the least recently launched", "program", oldest)
		s.remove(oldest)
	}
}

// loadFollowed reads followedFile: the followed programs that still have
// a profile.
func (s *store) loadFollowed() {
	b, err := os.ReadFile(filepath.Join(s.dir, followedFile))
	if err != nil {
		return
	}
	for _, p := range strings.Split(string(b), "\n") {
		if p != "" && s.model.Get(p) != nil && len(s.followed) < maxFollowed {
			s.followed[p] = true
		}
	}
}

// follow marks program followed and saves the list when it changed.
func (s *store) follow(program string, on bool) {
	if s.followed[program] == on || (on && len(s.followed) >= maxFollowed) {
		return
	}
	if on {
		s.followed[program] = true
	} else {
		delete(s.followed, program)
	}
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(s.followed)) {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	s.queue(saveJob{file: followedFile, b: []byte(b.String())})
}

// remove forgets program's profile and deletes its file.
func (s *store) remove(program string) {
	s.follow(program, false)
	s.model.Remove(program)
	delete(s.used, program)
	delete(s.bytes, program)
	s.queue(saveJob{program: program})
}

// touch notes a launch of program (its profile is used).
func (s *store) touch(program string) { s.used[program] = time.Now() }

func (s *store) queue(j saveJob) {
	s.pending.Add(1)
	select {
	case s.saves <- j:
	default:
		s.pending.Done()
		s.failures++
		s.log.Warn("profile saves are backed up: this change is kept in memory only until the next one", "program", j.program)
	}
}

// saver writes the queued changes in order.
func (s *store) saver() {
	defer close(s.done)
	for j := range s.saves {
		if j.file != "" {
			if err := live.WriteAtomic(s.dir, j.file, j.b); err != nil {
				s.log.Error("cannot save the followed programs", "err", err)
			}
		} else if j.b == nil {
			os.Remove(live.ProfilePath(s.dir, j.program))
		} else if err := live.WriteProfile(s.dir, j.program, j.b); err != nil {
			s.log.Error("cannot save a profile", "program", j.program, "err", err)
		}
		s.pending.Done()
	}
}

// flush waits until the queued saves are written.
func (s *store) flush() { s.pending.Wait() }

// close writes what is queued and stops the saver.
func (s *store) close() {
	close(s.saves)
	<-s.done
}

// totalBytes is the encoded size of every profile.
func (s *store) totalBytes() int {
	n := 0
	for _, b := range s.bytes {
		n += b
	}
	return n
}
