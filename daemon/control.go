package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/live"
)

// The control socket (Config.Socket) is a Unix stream socket, mode 0600
// (root only). A client sends one JSON request per line:
//
//	{"op":"status"}          the daemon answers one Status document
//	{"op":"claim","pid":N}   predictio run: the daemon answers "ok" and skips
//	                         the launches below process N while the
//	                         connection stays open

// Status is the daemon's state, as `predictio daemon status` shows it.
type Status struct {
	PID        int             `json:"pid"`
	Uptime     Duration        `json:"uptime"`
	Config     string          `json:"config,omitempty"`
	ProfileDir string          `json:"profile_dir"`
	Metrics    string          `json:"metrics,omitempty"`
	HintSocket string          `json:"hint_socket,omitempty"`
	Backend    string          `json:"backend"`
	Policies   []string        `json:"policies"`
	Profiles   []ProfileStatus `json:"profiles"`
	Bytes      int             `json:"profile_bytes"`
	Active     []ActiveLaunch  `json:"active"`
	Claims     int             `json:"claims"`
	Counts     StatusCounts    `json:"counts"`
	Notes      []string        `json:"notes,omitempty"`
}

// ProfileStatus is one program's profile.
type ProfileStatus struct {
	Program  string `json:"program"`
	Launches int    `json:"launches"`
	Files    int    `json:"files"`
	Pages    uint64 `json:"pages"`
	// Followed: the program's launches are traced while they run, for the
	// structure adapters (Config.Adapters).
	Followed bool `json:"followed,omitempty"`
}

// ActiveLaunch is a launch being learned.
type ActiveLaunch struct {
	Program string   `json:"program"`
	PID     uint32   `json:"pid"`
	Age     Duration `json:"age"`
	Procs   int      `json:"processes"`
	Events  uint64   `json:"events"`
}

// StatusCounts are the daemon's counters since it started.
type StatusCounts struct {
	Execs              uint64 `json:"execs"`
	Ignored            uint64 `json:"execs_ignored"`
	Claimed            uint64 `json:"execs_claimed_by_run"`
	Learned            uint64 `json:"launches_learned"`
	LaunchesPrefetched uint64 `json:"launches_prefetched"`
	NotLearned         uint64 `json:"launches_not_learned"`
	Relearned          uint64 `json:"profiles_relearned"`
	Invalidated        uint64 `json:"files_invalidated"`
	Events             uint64 `json:"events"`
	LaunchEvents       uint64 `json:"launch_events"`
	WarmUntraced       uint64 `json:"launches_untraced_warm"` // followed launches no longer traced: they ran warm
	RingDropped        uint64 `json:"ring_dropped"`
	PagesRequested     uint64 `json:"pages_requested"`
	PagesSubmitted     uint64 `json:"pages_submitted"`
	PagesCached        uint64 `json:"pages_cached"`
	Dropped            uint64 `json:"requests_dropped"`
	Prefetched         uint64 `json:"pages_prefetched"`
	UsedInTime         uint64 `json:"pages_used_in_time"`
	Late               uint64 `json:"pages_late"`
	Wasted             uint64 `json:"pages_wasted"`
	Hints              uint64 `json:"hints"`
	AdapterFiles       uint64 `json:"adapter_files"`         // files a structure adapter recognized
	TreeEvents         uint64 `json:"adapter_tree_events"`   // TreeChildEnter events the adapters derived
	TensorEvents       uint64 `json:"adapter_tensor_events"` // TensorLayout events the adapters derived
}

type request struct {
	Op  string `json:"op"`
	PID int    `json:"pid"`
}

// listen opens the control socket (root only) and serves it.
func (d *Daemon) listen() error {
	path := d.cfg.Socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create the control socket's directory: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("open control socket %s: exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return fmt.Errorf("open control socket %s: another daemon answers on it", path)
		}
		os.Remove(path)
	}
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return fmt.Errorf("open control socket: %w", err)
	}
	d.ctl = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go d.serveConn(c)
		}
	}()
	return nil
}

// serveConn answers one client.
func (d *Daemon) serveConn(c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		fmt.Fprintf(c, "error: %v\n", err)
		return
	}
	switch req.Op {
	case "status":
		b, _ := json.Marshal(d.Status())
		c.Write(append(b, '\n'))
	case "claim":
		if err := d.checkClaim(c, req.PID); err != nil {
			fmt.Fprintf(c, "error: %v\n", err)
			return
		}
		d.mu.Lock()
		d.claims[req.PID]++
		d.mu.Unlock()
		c.Write([]byte("ok\n"))
		_ = c.SetReadDeadline(time.Time{})
		// The claim lasts as long as the connection: wait for its end.
		var b [1]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				break
			}
		}
		d.mu.Lock()
		if d.claims[req.PID]--; d.claims[req.PID] <= 0 {
			delete(d.claims, req.PID)
		}
		d.mu.Unlock()
	default:
		fmt.Fprintf(c, "error: unknown op %q; want status or claim\n", req.Op)
	}
}

// checkClaim allows a claim of pid only by root or by pid's owner.
func (d *Daemon) checkClaim(c net.Conn, pid int) error {
	if pid <= 0 {
		return errors.New("claim: no pid")
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("claim: not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return fmt.Errorf("claim: peer credentials: %w", cerr)
	}
	if cred.Uid == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil || st.Uid != cred.Uid {
		return fmt.Errorf("claim: uid %d may not claim pid %d", cred.Uid, pid)
	}
	return nil
}

// Status returns the daemon's state.
func (d *Daemon) Status() Status {
	ls := d.loop.Stats()
	var eff live.Effect
	if d.ob != nil {
		eff, _ = d.loop.Effect(false)
	}
	src := d.src.Stats()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Status{PID: os.Getpid(), Uptime: Duration{time.Since(d.started).Round(time.Second)}, Config: d.cfgPath,
		ProfileDir: d.cfg.ProfileDir, Metrics: d.cfg.Metrics, HintSocket: d.cfg.HintSocket, Backend: d.cfg.Backend,
		Policies: d.cfg.Policies, Bytes: d.store.totalBytes(), Claims: len(d.claims), Notes: d.notes}
	for _, p := range d.store.model.Profiles() {
		s.Profiles = append(s.Profiles, ProfileStatus{Program: p.Program.Path, Launches: len(p.Launches), Files: len(p.Plan()), Pages: p.Pages(),
			Followed: d.store.followed[p.Program.Path]})
	}
	for _, l := range d.launches {
		s.Active = append(s.Active, ActiveLaunch{Program: l.program, PID: l.pid, Age: Duration{time.Since(l.start).Round(time.Millisecond)},
			Procs: len(l.members), Events: l.events})
	}
	sort.Slice(s.Active, func(i, j int) bool { return s.Active[i].PID < s.Active[j].PID })
	bs := ls.Backend
	s.Counts = StatusCounts{
		Execs: d.st.execs, Ignored: d.st.ignored, Claimed: d.st.claimed, Learned: d.st.learned, LaunchesPrefetched: d.st.prefetched,
		NotLearned: d.st.notLearned, Relearned: d.st.relearned, Invalidated: d.st.invalidated, Events: ls.Events,
		LaunchEvents: d.st.launchEvents, WarmUntraced: d.st.warmUntraced, RingDropped: src.Dropped, PagesRequested: bs.PagesRequested,
		PagesSubmitted: bs.PagesSubmitted, PagesCached: bs.PagesCached, Dropped: bs.Dropped,
		Prefetched: eff.Total.Prefetched, UsedInTime: eff.Total.UsedInTime, Late: eff.Total.Late, Wasted: eff.Total.Wasted,
		Hints: src.Hints,
	}
	if d.stage != nil {
		as := d.stage.Stats()
		s.Counts.AdapterFiles, s.Counts.TreeEvents, s.Counts.TensorEvents = as.Recognized, as.TreeEvents, as.TensorEvents
	}
	return s
}

// QueryStatus asks the daemon at socket for its Status.
func QueryStatus(socket string) (*Status, error) {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return nil, fmt.Errorf("query the daemon at %s: %w (is it running? systemctl status predictio)", socket, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(`{"op":"status"}` + "\n")); err != nil {
		return nil, fmt.Errorf("query the daemon at %s: %w", socket, err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("query the daemon at %s: %w", socket, err)
	}
	var s Status
	if err := json.Unmarshal(line, &s); err != nil {
		return nil, fmt.Errorf("query the daemon at %s: %s", socket, line)
	}
	return &s, nil
}
