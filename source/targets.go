package source

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/bpf"
)

// Targets. The kernel side (is_target in record.bpf.c) accepts a task when
// target_flags has targetAll, or targetPIDs and the task's process is in
// the pids hash, or targetCgroups and the task is under one of the cgroups
// in use. All of it can change while tracing: the map and flag updates take
// effect for the next event.

// initTargets applies the configured targets.
func (s *Source) initTargets() error {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	flags := uint32(0)
	if s.cfg.All {
		flags |= targetAll
	}
	for _, p := range s.cfg.PIDs {
		if err := s.coll.Maps[bpf.RecordMapPids].Put(uint32(p), uint8(1)); err != nil {
			return fmt.Errorf("add pid %d: %w", p, err)
		}
		flags |= targetPIDs
	}
	s.flags = flags
	for _, cg := range s.cfg.Cgroups {
		if err := s.addCgroupLocked(cg); err != nil {
			return err
		}
	}
	if s.cfg.Command {
		if s.ownCg != "" {
			if err := s.addCgroupLocked(s.ownCg); err != nil {
				return err
			}
			s.ownCgFD = s.cgSlots[s.slotOf(s.ownCg)]
		} else {
			s.flags |= targetPIDs
		}
	}
	if s.cfg.Exec == ExecAll {
		if err := s.coll.Variables["exec_all"].Set(uint32(1)); err != nil {
			return fmt.Errorf("set exec_all: %w", err)
		}
	}
	return s.setFlagsLocked(s.flags)
}

func (s *Source) setFlagsLocked(f uint32) error {
	s.flags = f
	if err := s.coll.Variables["target_flags"].Set(f); err != nil {
		return fmt.Errorf("set target flags: %w", err)
	}
	return s.changedLocked()
}

// changedLocked tells the programs the targets changed: threads' cached
// "is a target" expire.
func (s *Source) changedLocked() error {
	s.gen++
	if err := s.coll.Variables["target_gen"].Set(s.gen); err != nil {
		return fmt.Errorf("set target generation: %w", err)
	}
	return nil
}

// AddPID makes process pid a target, with the children it forks from now
// on (threads included). Its earlier children are not added.
func (s *Source) AddPID(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("add pid %d: not a process id", pid)
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed {
		return fmt.Errorf("add pid %d: %w", pid, ErrStopped)
	}
	if err := s.coll.Maps[bpf.RecordMapPids].Put(uint32(pid), uint8(1)); err != nil {
		return fmt.Errorf("add pid %d: %w", pid, err)
	}
	return s.setFlagsLocked(s.flags | targetPIDs)
}

// RemovePID stops tracing process pid (not its children, which are
// targets of their own once forked). Removing a pid that is not a target
// is not an error.
func (s *Source) RemovePID(pid int) error {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed {
		return fmt.Errorf("remove pid %d: %w", pid, ErrStopped)
	}
	err := s.coll.Maps[bpf.RecordMapPids].Delete(uint32(pid))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("remove pid %d: %w", pid, err)
	}
	return s.changedLocked()
}

// AddCgroup makes every task in the cgroup v2 directory dir and below a
// target. At most four cgroups are targets at a time (a command's own
// cgroup counts).
func (s *Source) AddCgroup(dir string) error {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed {
		return fmt.Errorf("add cgroup %s: %w", dir, ErrStopped)
	}
	return s.addCgroupLocked(dir)
}

func (s *Source) slotOf(dir string) int {
	for i, p := range s.cgPaths {
		if p == dir && s.cgSlots[i] >= 0 {
			return i
		}
	}
	return -1
}

func (s *Source) addCgroupLocked(dir string) error {
	dir = filepath.Clean(dir)
	if s.slotOf(dir) >= 0 {
		return nil
	}
	slot := -1
	for i, fd := range s.cgSlots {
		if fd < 0 {
			slot = i
			break
		}
	}
	if slot < 0 {
		return fmt.Errorf("add cgroup %s: already %d cgroups traced", dir, maxCgroups)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	if err := s.coll.Maps[bpf.RecordMapCgroups].Put(uint32(slot), uint32(fd)); err != nil {
		unix.Close(fd)
		return fmt.Errorf("use cgroup %s: %w (is it a cgroup v2 directory?)", dir, err)
	}
	s.cgSlots[slot], s.cgPaths[slot] = fd, dir
	if err := s.setMaskLocked(); err != nil {
		return err
	}
	return s.setFlagsLocked(s.flags | targetCgroups)
}

// setMaskLocked publishes which cgroup slots are in use.
func (s *Source) setMaskLocked() error {
	var mask uint32
	for i, fd := range s.cgSlots {
		if fd >= 0 {
			mask |= 1 << i
		}
	}
	if err := s.coll.Variables["cgroup_mask"].Set(mask); err != nil {
		return fmt.Errorf("set cgroup mask: %w", err)
	}
	return nil
}

// RemoveCgroup stops tracing the tasks of cgroup dir (added by AddCgroup
// or Config.Cgroups).
func (s *Source) RemoveCgroup(dir string) error {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed {
		return fmt.Errorf("remove cgroup %s: %w", dir, ErrStopped)
	}
	slot := s.slotOf(filepath.Clean(dir))
	if slot < 0 {
		return fmt.Errorf("remove cgroup %s: not a target", dir)
	}
	fd := s.cgSlots[slot]
	s.cgSlots[slot], s.cgPaths[slot] = -1, ""
	// The mask first: the programs stop looking at the slot before it
	// empties.
	if err := s.setMaskLocked(); err != nil {
		return err
	}
	_ = s.coll.Maps[bpf.RecordMapCgroups].Delete(uint32(slot))
	if fd != s.ownCgFD {
		unix.Close(fd)
	}
	return s.changedLocked()
}

// AddExecTarget makes every process that execs the file at path a target
// from its exec on (the kernel adds it to the pid set before the new
// program's first instruction), with its children. Needs Config.Exec.
func (s *Source) AddExecTarget(path string) error {
	key, err := s.execKey(path)
	if err != nil {
		return fmt.Errorf("add exec target %s: %w", path, err)
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed {
		return fmt.Errorf("add exec target %s: %w", path, ErrStopped)
	}
	if err := s.coll.Maps["exec_targets"].Put(&key, uint8(1)); err != nil {
		return fmt.Errorf("add exec target %s: %w", path, err)
	}
	s.execKeys++
	if err := s.coll.Variables["exec_targets_active"].Set(uint32(1)); err != nil {
		return fmt.Errorf("add exec target %s: %w", path, err)
	}
	return s.setFlagsLocked(s.flags | targetPIDs)
}

// RemoveExecTarget undoes AddExecTarget for later execs; processes already
// added stay targets until RemovePID.
func (s *Source) RemoveExecTarget(path string) error {
	key, err := s.execKey(path)
	if err != nil {
		return fmt.Errorf("remove exec target %s: %w", path, err)
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed {
		return fmt.Errorf("remove exec target %s: %w", path, ErrStopped)
	}
	if err := s.coll.Maps["exec_targets"].Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("remove exec target %s: %w", path, err)
	}
	return s.changedLocked()
}

func (s *Source) execKey(path string) (bpf.RecordFilekey, error) {
	if s.cfg.Exec == ExecNone {
		return bpf.RecordFilekey{}, errors.New("exec events are off (Config.Exec)")
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return bpf.RecordFilekey{}, err
	}
	k := statKey(&st)
	return bpf.RecordFilekey{Ino: k.ino, Dev: k.dev}, nil
}

// makeCommandCgroup creates the cgroup a command runs in, under the cgroup2
// mount cg2; without one (or when it cannot be created) commands are
// followed through the pid set.
func (s *Source) makeCommandCgroup(cg2 string) {
	if !s.cfg.Command {
		return
	}
	if cg2 == "" {
		s.notes = append(s.notes, "source: no cgroup v2 mount; following the command by pid from its start")
		return
	}
	removeStaleCgroups(cg2)
	dir := filepath.Join(cg2, fmt.Sprintf("predictio-source-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		s.notes = append(s.notes, fmt.Sprintf("source: cannot create cgroup %s (%v); following the command by pid from its start", dir, err))
		return
	}
	s.ownCg = dir
}

// StartCommand starts cmd (not yet started) as a target with all its
// descendants, from its first instruction: in the source's own cgroup
// (CLONE_INTO_CGROUP, Linux 5.7), or, without one, under PTRACE_TRACEME: it
// stops right after its execve, its pid goes into the set, and only then is
// it let go (only the kernel's own reads of the executable during execve
// are missed). Needs Config.Command.
func (s *Source) StartCommand(cmd *exec.Cmd) error {
	if !s.cfg.Command {
		return fmt.Errorf("start %s: the source was not opened with Config.Command", cmd.Path)
	}
	if s.state >= 2 {
		return fmt.Errorf("start %s: %w", cmd.Path, ErrStopped)
	}
	if s.ownCg != "" {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = s.ownCgFD
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s in cgroup %s (CLONE_INTO_CGROUP needs Linux 5.7): %w", cmd.Path, s.ownCg, err)
		}
		return nil
	}
	if err := startTraced(cmd, s.coll.Maps[bpf.RecordMapPids]); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return nil
}

// startTraced starts cmd under PTRACE_TRACEME, adds its pid to pids once it
// stopped after its execve, and releases it.
func startTraced(cmd *exec.Cmd, pids *ebpf.Map) error {
	// ptrace requests must come from the thread that started the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	perr := pids.Put(uint32(pid), uint8(1))
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return fmt.Errorf("wait for it to exec: %w", err)
	}
	if ws.Stopped() {
		if err := unix.PtraceDetach(pid); err != nil {
			return fmt.Errorf("release it after exec: %w", err)
		}
	}
	if perr != nil {
		return fmt.Errorf("follow pid %d: %w", pid, perr)
	}
	return nil
}

// CommandCgroup returns the cgroup commands run in ("" when they are
// followed by pid).
func (s *Source) CommandCgroup() string { return s.ownCg }

// closeTargets closes the cgroup descriptors and removes the command
// cgroup. A cgroup still holding processes (a command's descendant that
// outlived it) cannot be removed; the next Open removes it once empty.
func (s *Source) closeTargets() {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	for i, fd := range s.cgSlots {
		if fd >= 0 {
			if fd == s.ownCgFD {
				s.ownCgFD = -1
			}
			unix.Close(fd)
			s.cgSlots[i] = -1
		}
	}
	if s.ownCgFD >= 0 { // its slot was removed (RemoveCgroup)
		unix.Close(s.ownCgFD)
		s.ownCgFD = -1
	}
	if s.ownCg != "" {
		for i := 0; i < 5; i++ {
			err := os.Remove(s.ownCg)
			if err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, unix.EBUSY) {
				break
			}
			// The last process of the cgroup may still be on its way
			// out for a moment after its parent reaped it.
			time.Sleep(time.Millisecond)
		}
		s.ownCg = ""
	}
}

// removeStaleCgroups removes the empty cgroups of sources whose process is
// gone (killed before they could); rmdir fails on cgroups still in use.
func removeStaleCgroups(mnt string) {
	for _, pat := range []string{"predictio-source-*", "predictio-record-*"} {
		dirs, _ := filepath.Glob(filepath.Join(mnt, pat))
		for _, d := range dirs {
			var pid, ns int64
			base := filepath.Base(d)
			if _, err := fmt.Sscanf(base[len(pat)-1:], "%d-%d", &pid, &ns); err != nil {
				continue
			}
			if unix.Kill(int(pid), 0) == unix.ESRCH {
				_ = os.Remove(d)
			}
		}
	}
}
