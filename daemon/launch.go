package daemon

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/live"
	"github.com/predictio/predictio/policies"
)

// A launch is a program's start-up as the daemon learns it: the process
// that exec'd the program (the launch's first process), every process it
// forks and every exec of them (a pyenv shim that execs bash, pyenv and
// the interpreter is one launch), from the exec until the first process
// exits or learn.window has passed.
//
// A launch of a followed program (Config.Adapters) is traced for as long
// as its first process runs, so that the adapters see its accesses; it is
// learned, if it is, from its first learn.window.
type launch struct {
	pid     uint32 // the first process
	program string // the resolved path given to exec: the profile's key
	root    string // prefix of its mount namespace (live.ProcRoot)
	exe     policies.LaunchFile
	ran     uint32                   // source file id of the first exec
	rec     *policies.LaunchRecorder // nil: not learned (followed only)
	start   time.Time
	members map[uint32]bool
	events  uint64
	follow  bool              // traced until the first process exits
	adapted uint64            // pages it read out of order of files an adapter recognized (up to followPages)
	last    map[uint32]uint64 // by recognized file: the page after its last demand (inOrder)
	done    bool
	// A followed launch that is not learned stops being traced once its
	// first warmCheck reads and faults of recognized files were all
	// served from the page cache (warm): demand counts them, missed
	// counts the pages its own threads added to the cache meanwhile, and
	// submitted0 is the backend's submitted pages when it started (the
	// daemon's own prefetches for it read pages too: then it is not warm).
	demand, missed uint64
	submitted0     uint64
}

// checksWarm reports whether l's accesses still count toward warmLaunch's
// check: a followed launch not being learned, before its warmCheck-th read.
func (l *launch) checksWarm() bool {
	return l.follow && l.rec == nil && l.demand < warmCheck
}

// Following a program costs every launch of it its tracing for as long as
// it runs, and the rest of the machine the access programs' filter, so it
// is for programs that read much of structured files out of order: a
// learned launch that read at least followPages pages of them, each read
// not within seqGap pages after the last of its file, starts it, and
// unfollowAfter followed launches in a row that read fewer end it. A
// front-to-back read (a table scan by rowid of a table filled in order)
// is the kernel's readahead's to serve, and following it cost a 35 ms
// sqlite3 query of a 60 MiB table 14-16 ms (bench launch, 2026-12-07).
//
// A launch that runs warm gains nothing from it and pays about a
// microsecond of tracing per read plus the adapters' work beside it (a
// warm 16 K-row sqlite3 scan 28 ms alone, 46-49 ms followed): once its
// first warmCheck reads and faults of recognized files all hit the page
// cache, with nothing read for it by its threads or by the backend, its
// tracing stops (warmLaunch). A launch that turns cold after that is not
// prefetched for.
const (
	followPages   = 256 // 1 MiB of 4 KiB pages
	seqGap        = 32  // pages a read may skip and still continue its file's last
	maxOrderFiles = 64  // recognized files a launch's order is kept for
	unfollowAfter = 3
	warmCheck     = 1024
)

// maxAncestry is how far up the process tree a process is looked for in
// a launch or a claim.
const maxAncestry = 32

// observe is the loop's Tap: it runs for every event, with the daemon's
// lock held (Consume).
func (d *Daemon) observe(ev *policies.Event) {
	if ev.Kind == policies.EventProcessExec {
		// Which exec starts a launch was decided from the opens ring
		// (onExec); the exec row of a launch's process joins it.
		if l := d.member(ev.PID); l != nil {
			if l.ran == 0 {
				l.ran = ev.File
			}
			if l.rec != nil {
				l.rec.Observe(ev)
			}
		}
		return
	}
	if ev.PID == 0 {
		return // a hint from outside any launch
	}
	l := d.members[ev.PID]
	if l == nil {
		if l = d.adopt(ev.PID); l == nil {
			d.stray(ev.PID)
			return
		}
	}
	if l.rec != nil {
		l.rec.Observe(ev)
	}
	if d.stage != nil && ev.Kind == policies.EventFileAccess && (l.adapted < followPages || l.checksWarm()) && d.stage.Recognized(ev.File) {
		if l.adapted < followPages && !l.inOrder(ev) {
			l.adapted += uint64(max(ev.Access.NPages, 1))
		}
		if l.checksWarm() {
			d.warmLaunch(l, ev)
		}
	}
	l.events++
	d.st.launchEvents++
}

// inOrder reports whether access ev continues the last demand of its
// file within seqGap pages (a file read before), or is no demand (the
// kernel's readahead and page insertions, which follow the demands), and
// records it. An mmap reader's demand is mostly its fault-around rows
// (map): an LMDB scan with MDB_NORDAHEAD showed 946 of them against 198
// faults. A table scan's occasional interior page costs two reads out of
// order: the jump to it and the one back. Past maxOrderFiles files, every
// read of another file counts as out of order.
func (l *launch) inOrder(ev *policies.Event) bool {
	a := &ev.Access
	if !a.Kind.Demand() {
		return true
	}
	next := a.Page + uint64(max(a.NPages, 1))
	last, seen := l.last[ev.File]
	if !seen && len(l.last) >= maxOrderFiles {
		return false
	}
	if l.last == nil {
		l.last = make(map[uint32]uint64)
	}
	l.last[ev.File] = next
	return seen && a.Page >= last && a.Page <= last+seqGap
}

// warmLaunch counts access ev of a recognized file of a launch that
// checksWarm, and stops tracing the launch if its first warmCheck reads and
// faults ran warm (see warmCheck). A launch being learned keeps its
// tracing.
func (d *Daemon) warmLaunch(l *launch, ev *policies.Event) {
	switch ev.Access.Kind {
	case formats.KindCacheAdd:
		l.missed += uint64(max(ev.Access.NPages, 1))
		return
	case formats.KindRead, formats.KindFault:
	default:
		return
	}
	if l.demand++; l.demand < warmCheck {
		return
	}
	if l.missed > 0 || d.loop.Backend().Stats().PagesSubmitted != l.submitted0 {
		return
	}
	d.st.warmUntraced++
	for pid := range l.members {
		_ = d.src.RemovePID(int(pid))
	}
	d.log.Debug("a followed launch runs warm: no longer traced", "program", l.program, "pid", l.pid, "accesses", l.demand)
}

// execNote is an exec as the opens ring reports it: promptly, whatever
// the event ring's batching.
type execNote struct {
	pid  uint32
	ts   uint64
	path string
}

// hookExec is the source's OnExec: it hands the exec to the exec worker
// (it runs on the opens reader, which must not wait for the daemon's
// lock: the consumer may be waiting for the opens reader).
func (d *Daemon) hookExec(pid uint32, ts uint64, path string) {
	select {
	case d.execs <- execNote{pid, ts, path}:
	default:
		d.execDrops.Add(1)
	}
}

// execWorker handles the execs, one at a time, under the daemon's lock.
func (d *Daemon) execWorker() {
	for n := range d.execs {
		d.mu.Lock()
		if !d.closed {
			d.onExec(n)
		}
		d.mu.Unlock()
	}
}

// onExec handles an exec anywhere on the machine.
func (d *Daemon) onExec(n execNote) {
	d.st.execs++
	d.invalidate()
	pid, path := n.pid, n.path
	if l := d.member(pid); l != nil {
		return // a later exec of the launch: part of it (its exec row joins it)
	}
	if d.claimed(pid) {
		d.st.claimed++
		return
	}
	root, err := live.ProcRoot(int(pid))
	if err != nil {
		d.ignore(pid, path, "exited already")
		return
	}
	program, err := d.resolve(root, path)
	if err != nil {
		d.ignore(pid, path, err.Error())
		return
	}
	if !d.cfg.Learn.wants(program) {
		d.st.ignored++ // not logged: most execs of the machine
		return
	}
	exe, err := live.StatFile(root, program)
	if err != nil || exe.PathOnly() {
		d.ignore(pid, program, "gone")
		return
	}
	pc := d.programCounts(program)
	pc.Launches++
	prof := d.store.get(program)
	if prof != nil && !prof.Program.Same(&exe) {
		d.log.Info("program changed since it was learned: learning it again", "program", program)
		d.untarget(prof)
		d.store.remove(program)
		d.st.relearned++
		prof = nil
	}
	// What the backend read before this exec's prefetch: a launch that
	// the daemon read pages for is not warm (warmLaunch).
	submitted0 := d.loop.Backend().Stats().PagesSubmitted
	requested := false
	if prof != nil {
		d.store.touch(program)
		if len(prof.Launches) >= d.cfg.Learn.MinLaunches {
			requested = d.loop.Exec(pid, program, 0, n.ts)
			d.st.prefetched++
			pc.Prefetched++
			d.log.Debug("prefetched", "program", program, "pid", pid, "launches", len(prof.Launches))
		}
	}
	learn := prof.Wants(d.cfg.Learn.Launches, d.cfg.Learn.Refresh.Duration, time.Now())
	follow := d.stage != nil && d.store.followed[program]
	if learn || follow {
		d.learn(n, program, root, exe, learn, follow, submitted0)
	} else if d.ob != nil && requested {
		// Only a launch something was requested for: a demand process
		// pays the observer's read hooks on every read.
		go d.demandTree(pid)
	}
}

// demandTree makes the processes of a launch that is prefetched but not
// learned (so not traced: the daemon sees none of their events) demand
// processes of the effect observer, so that their use of the prefetched
// pages is counted: it follows /proc/PID/task/TID/children from the
// launch's first process every 20 ms, for at most 3 s or until that
// process exits.
func (d *Daemon) demandTree(root uint32) {
	seen := map[uint32]bool{root: true}
	deadline := time.Now().Add(min(3*time.Second, d.cfg.Learn.Window.Duration))
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		alive := false
		stack := []uint32{root}
		for len(stack) > 0 && len(seen) < 4096 {
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			tasks, err := os.ReadDir("/proc/" + strconv.FormatUint(uint64(p), 10) + "/task")
			if err != nil {
				continue
			}
			if p == root {
				alive = true
			}
			for _, t := range tasks {
				b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(p), 10) + "/task/" + t.Name() + "/children")
				if err != nil {
					continue
				}
				for _, f := range bytes.Fields(b) {
					c, err := strconv.ParseUint(string(f), 10, 32)
					if err != nil {
						continue
					}
					if !seen[uint32(c)] {
						seen[uint32(c)] = true
						d.loop.AddDemand(uint32(c))
					}
					stack = append(stack, uint32(c))
				}
			}
		}
		if !alive {
			break
		}
	}
	for p := range seen {
		if p != root {
			d.loop.ForgetPID(p)
		}
	}
}

// ignore counts an exec the daemon does not follow, and logs why (debug).
func (d *Daemon) ignore(pid uint32, path, why string) {
	d.st.ignored++
	d.log.Debug("exec not followed", "pid", pid, "path", path, "why", why)
}

// learn starts following the launch of program by process pid, when
// fewer than limits.concurrent launches are followed: to learn it
// (record), for as long as it runs (follow: its program is followed), or
// both.
func (d *Daemon) learn(n execNote, program, root string, exe policies.LaunchFile, record, follow bool, submitted0 uint64) {
	pid := n.pid
	if len(d.launches) >= d.cfg.Limits.Concurrent {
		d.st.notLearned++
		return
	}
	// The access programs are detached between launches (source.Pause):
	// attached again in microseconds, but the launch's first accesses
	// until then are not learned.
	if err := d.trace.resume(); err != nil {
		d.log.Warn("cannot resume tracing", "err", err)
		d.st.notLearned++
		return
	}
	if err := d.src.AddPID(int(pid)); err != nil {
		d.st.notLearned++
		return
	}
	l := &launch{pid: pid, program: program, root: root, exe: exe, follow: follow,
		start: time.Now(), members: map[uint32]bool{pid: true}, submitted0: submitted0}
	if record {
		l.rec = policies.NewLaunchRecorder(n.ts)
	}
	d.launches[pid] = l
	if follow {
		if d.follows++; d.follows == 1 {
			d.src.SetPoll(d.cfg.FollowPoll.Duration)
		}
	}
	d.trace.active.Add(1)
	d.members[pid] = l
	delete(d.strays, pid)
	go d.await(l)
}

// await ends l when its first process exits or learn.window has passed,
// whichever comes first; a followed launch is learned then and stops
// being traced only when its first process exits. It waits on a pidfd
// (Linux 5.3): no polling.
func (d *Daemon) await(l *launch) {
	fd, err := unix.PidfdOpen(int(l.pid), 0)
	if err == nil {
		defer unix.Close(fd)
	}
	// An error means the process is gone already: end at once.
	exited := err != nil || waitExit(fd, l.start.Add(d.cfg.Learn.Window.Duration))
	if l.follow && !exited {
		d.mu.Lock()
		if !d.closed {
			d.learnLaunch(l)
		}
		d.mu.Unlock()
		waitExit(fd, time.Time{})
	}
	// Events of the last moments may still be in the ring: a short
	// grace, so that they are delivered before the launch is learned.
	time.Sleep(20 * time.Millisecond)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.end(l)
	}
}

// waitExit waits until the process of pidfd fd exits (true) or until
// deadline (false; the zero time: no deadline).
func waitExit(fd int, deadline time.Time) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		ms := -1
		if !deadline.IsZero() {
			ms = int(max(time.Until(deadline), 0) / time.Millisecond)
		}
		n, err := unix.Poll(fds, ms)
		if err != unix.EINTR {
			return n > 0
		}
	}
}

// end stops tracing launch l's processes and learns it, if that was not
// done yet.
func (d *Daemon) end(l *launch) {
	if l.done {
		return
	}
	l.done = true
	delete(d.launches, l.pid)
	if l.follow {
		if d.follows--; d.follows == 0 {
			d.src.SetPoll(d.cfg.Poll.Duration)
		}
	}
	d.trace.active.Add(-1)
	for pid := range l.members {
		delete(d.members, pid)
		_ = d.src.RemovePID(int(pid))
		d.loop.ForgetPID(pid)
	}
	if len(d.launches) == 0 {
		// Nothing to learn: soon no program of the source runs on the
		// machine's system calls, reads and faults until the next.
		d.trace.idle()
	}
	d.followByUse(l)
	d.learnLaunch(l)
}

// learnLaunch learns launch l into its program's profile, once.
func (d *Daemon) learnLaunch(l *launch) {
	if l.rec == nil {
		return
	}
	rec := l.rec
	l.rec = nil
	if d.stage != nil {
		// What an adapter recognized is planned by the pages launches
		// share (policies.TouchStructured).
		rec.MarkStructured(d.stage.Recognized)
	}
	launchRec, files := rec.Launch(func(id uint32) (policies.LaunchFile, bool) {
		f, ok := d.src.File(id)
		if !ok {
			return policies.LaunchFile{}, false
		}
		return live.ResolveLearned(l.root, f, l.start)
	}, l.start.UnixNano(), uint64(time.Since(l.start)))
	if len(launchRec.Touches) == 0 {
		d.log.Debug("a launch had nothing to learn", "program", l.program, "pid", l.pid, "events", l.events)
		return
	}
	prof := d.store.get(l.program)
	if prof == nil {
		prof = &policies.LaunchProfile{Program: l.exe}
		if f, ok := d.src.File(l.ran); ok {
			if f.Path == "" {
				f.Path = interpreter(l.root, l.program)
			}
			if lf, ok := live.Resolve(l.root, f); ok {
				prof.Ran = lf
			}
		}
	}
	if err := prof.AddLaunch(launchRec, files, d.cfg.Learn.Launches); err != nil {
		d.log.Warn("cannot learn a launch", "program", l.program, "err", err)
		return
	}
	d.invalidate()
	d.store.put(prof)
	d.target(prof)
	d.st.learned++
	d.programCounts(l.program).Learned++
	d.programCounts(l.program).Events += l.events
	d.log.Info("learned a launch", "program", l.program, "pid", l.pid, "files", len(files), "launches", len(prof.Launches),
		"pages", prof.Pages(), "traced", time.Since(l.start).Round(time.Millisecond), "events", l.events)
}

// followByUse follows l's program when l read at least followPages pages
// of files an adapter recognized, and stops when unfollowAfter followed
// launches in a row read fewer. It runs once per launch, when its tracing
// ends (end).
func (d *Daemon) followByUse(l *launch) {
	used := l.adapted >= followPages
	switch followed := d.store.followed[l.program]; {
	case used && !followed:
		d.log.Info("following the program: it reads files a structure adapter recognized", "program", l.program, "pages", l.adapted)
		d.store.follow(l.program, true)
	case used:
		delete(d.unused, l.program)
	case followed && l.follow:
		if d.unused[l.program]++; d.unused[l.program] >= unfollowAfter {
			d.log.Info("no longer following the program: its last launches read little of structured files", "program", l.program, "launches", unfollowAfter)
			delete(d.unused, l.program)
			d.store.follow(l.program, false)
		}
	}
}

// invalidate drops the files the loop found changed from the profiles
// that hold them (and their oldest launch: the next launch is learned).
func (d *Daemon) invalidate() {
	changed := d.loop.Invalid()
	if len(changed) == 0 {
		return
	}
	for _, p := range d.store.model.Profiles() {
		if p.InvalidateFiles(changed) {
			d.store.put(p)
			d.st.invalidated++
		}
	}
}

// target makes the kernel trace p's program from the first instruction of
// its next exec (source.AddExecTarget), so that its launches are learned
// whole; for a script, whose exec names its interpreter, the launch is
// traced from the exec event on.
func (d *Daemon) target(p *policies.LaunchProfile) {
	prog := p.Program.Path
	if d.targets[prog] || (p.Ran.Path != "" && p.Ran.Path != prog) {
		return
	}
	if err := d.src.AddExecTarget(prog); err == nil {
		d.targets[prog] = true
	}
}

func (d *Daemon) untarget(p *policies.LaunchProfile) {
	prog := p.Program.Path
	if d.targets[prog] {
		_ = d.src.RemoveExecTarget(prog)
		delete(d.targets, prog)
	}
}

// resolveTTL is how long an exec path's resolution is reused (execs of
// the same program are frequent: a compile's gcc, cc1, as, ld).
const resolveTTL = 5 * time.Second

type resolved struct {
	program string
	at      time.Time
}

// resolve returns path without symlinks, inside root; cached for this
// namespace's paths.
func (d *Daemon) resolve(root, path string) (string, error) {
	if root != "" {
		return live.ResolveInRoot(root, path)
	}
	if r, ok := d.resolved[path]; ok && time.Since(r.at) < resolveTTL {
		return r.program, nil
	}
	p, err := live.ResolveInRoot("", path)
	if err != nil {
		return "", err
	}
	if len(d.resolved) >= 4096 {
		clear(d.resolved)
	}
	d.resolved[path] = resolved{p, time.Now()}
	return p, nil
}

// member returns the launch process pid is part of, or nil.
func (d *Daemon) member(pid uint32) *launch {
	if l := d.members[pid]; l != nil {
		return l
	}
	return d.adopt(pid)
}

// adopt returns the launch process pid belongs to (a descendant of one of
// its processes), adding it; nil when none.
func (d *Daemon) adopt(pid uint32) *launch {
	if len(d.launches) == 0 {
		return nil
	}
	p := pid
	for range maxAncestry {
		pp, ok := ppid(p)
		if !ok || pp <= 1 {
			return nil
		}
		if l := d.members[pp]; l != nil {
			l.members[pid] = true
			d.members[pid] = l
			return l
		}
		p = pp
	}
	return nil
}

// stray stops tracing a process that is no launch's (a process of an
// ended launch, or one an exec target added that the daemon skips).
func (d *Daemon) stray(pid uint32) {
	if t, ok := d.strays[pid]; ok && time.Since(t) < time.Second {
		return
	}
	if len(d.strays) > 4096 {
		clear(d.strays)
	}
	d.strays[pid] = time.Now()
	_ = d.src.RemovePID(int(pid))
	d.st.strayRemoved++
}

// claimed reports whether pid descends from a process that predictio run
// claimed. While there are claims, a process whose parent cannot be read
// (it has exited already) counts as claimed: the daemon must never
// learn or prefetch a launch run owns, and it could not follow an exited
// one anyway.
func (d *Daemon) claimed(pid uint32) bool {
	if len(d.claims) == 0 {
		return false
	}
	p := pid
	for range maxAncestry {
		if d.claims[int(p)] > 0 {
			return true
		}
		pp, ok := ppid(p)
		if !ok {
			return p == pid
		}
		if pp <= 1 {
			return false
		}
		p = pp
	}
	return false
}

// ppid reads the parent of pid from /proc/PID/stat.
func ppid(pid uint32) (uint32, bool) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(f[1]), 10, 32)
	return uint32(v), err == nil
}

func (d *Daemon) programCounts(program string) *programCounts {
	pc := d.st.byProgram[program]
	if pc == nil {
		if len(d.st.byProgram) >= 4*d.cfg.Limits.MaxProfiles {
			clear(d.st.byProgram) // bounded: counts restart
		}
		pc = &programCounts{}
		d.st.byProgram[program] = pc
	}
	return pc
}

// interpreter returns the interpreter of a script's #! line (inside root).
func interpreter(root, path string) string {
	f, err := os.Open(root + path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := f.Read(b)
	line, _, _ := bytes.Cut(b[:n], []byte("\n"))
	rest, ok := bytes.CutPrefix(line, []byte("#!"))
	if !ok {
		return ""
	}
	fs := bytes.Fields(rest)
	if len(fs) == 0 || fs[0][0] != '/' {
		return ""
	}
	return string(fs[0])
}
