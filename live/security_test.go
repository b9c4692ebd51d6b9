package live

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/source"
)

// profileOf is a one-launch profile touching every page of files, in
// order.
func profileOf(t *testing.T, program string, files ...string) *policies.LaunchProfile {
	t.Helper()
	var l policies.Launch
	var lfs []policies.LaunchFile
	for i, f := range files {
		lf, err := StatFile("", f)
		if err != nil {
			t.Fatal(err)
		}
		lfs = append(lfs, lf)
		l.Touches = append(l.Touches, policies.LaunchTouch{File: uint32(i), FirstNS: uint64(i), Kinds: 1 << 1,
			Ranges: []policies.Range{{First: 0, N: uint32(policies.PagesOf(lf.Size, 0))}}})
	}
	p := &policies.LaunchProfile{Program: policies.LaunchFile{Path: program}}
	if err := p.AddLaunch(l, lfs, 5); err != nil {
		t.Fatal(err)
	}
	return p
}

// prefetchFor runs the launch policy of p for process pid in a loop of
// its own and waits until the backend has handed everything to the
// kernel.
func prefetchFor(t *testing.T, p *policies.LaunchProfile, pid int, ac *source.AccessChecker) Stats {
	t.Helper()
	l, err := New(Config{Policies: []string{"launch"}, Launch: policies.NewLaunchModel(p), Access: ac}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Exec(uint32(pid), p.Program.Path, 0, 1)
	if _, err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	time.Sleep(100 * time.Millisecond) // the kernel's reads of what was advised
	return st
}

// sleeper starts a process as uid/gid that lives until the test ends.
func sleeper(t *testing.T, uid, gid uint32, extra ...func(*exec.Cmd)) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	for _, f := range extra {
		f(cmd)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestLaunchChecksAsTheProcess: a launch of another user's process
// prefetches only what that user may read. A root-only file of the
// profile stays uncached; the world-readable one is prefetched.
func TestLaunchChecksAsTheProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SETUID, CAP_SETGID to check as another user)")
	}
	ac, err := source.NewAccessChecker()
	if err != nil {
		t.Skip(err)
	}
	defer ac.Close()
	files := testFiles(t, 2, 256<<10)
	os.Chmod(filepath.Dir(filepath.Dir(files[0])), 0o755)
	os.Chmod(files[0], 0o644)
	os.Chmod(files[1], 0o600) // root's
	p := profileOf(t, "/usr/bin/sleep", files...)
	nobody := sleeper(t, 65534, 65534)
	evict(t, files)
	st := prefetchFor(t, p, nobody.Process.Pid, ac)
	if st.ProfileFiles.Denied != 1 || st.ProfileFiles.Checked != 1 {
		t.Errorf("profile files: %+v, want 1 checked and 1 denied", st.ProfileFiles)
	}
	if n := cached(t, files[1]); n != 0 {
		t.Errorf("the root-only file has %d pages cached after a launch by nobody", n)
	}
	if n := cached(t, files[0]); n < 60 {
		t.Errorf("the readable file has %d of 64 pages cached", n)
	}
	// Without a checker, another user's launch prefetches nothing.
	evict(t, files)
	st = prefetchFor(t, p, nobody.Process.Pid, nil)
	if st.ProfileFiles.Checked != 0 || cached(t, files[0]) != 0 {
		t.Errorf("no checker: %+v, %d pages cached", st.ProfileFiles, cached(t, files[0]))
	}
}

// TestLaunchRefusesSymlinks: a profile file replaced by a symlink (to a
// file the program never opened) is never read; neither is a file
// replaced by another.
func TestLaunchRefusesSymlinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to evict with POSIX_FADV_DONTNEED on any file")
	}
	files := testFiles(t, 3, 256<<10)
	secret := files[2]
	p := profileOf(t, "/bin/prog", files[0], files[1])
	os.Remove(files[0])
	if err := os.Symlink(secret, files[0]); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(files[1])
	os.Remove(files[1])
	if err := os.WriteFile(files[1], b, 0o644); err != nil { // same content, new inode
		t.Fatal(err)
	}
	evict(t, []string{secret, files[1]})
	st := prefetchFor(t, p, 0, nil)
	if st.ProfileFiles.Changed != 2 || st.Backend.PagesRequested != 0 {
		t.Errorf("profile files %+v, backend %+v: want both changed and nothing requested", st.ProfileFiles, st.Backend)
	}
	if n := cached(t, secret); n != 0 {
		t.Errorf("the symlink's target has %d pages cached", n)
	}
	if n := cached(t, files[1]); n != 0 {
		t.Errorf("the replaced file has %d pages cached", n)
	}
}

// TestLaunchResolvesInTheProcessMountNamespace: for a process in another
// mount namespace a profile's path names the file in its namespace
// (through /proc/PID/root), not the one this process sees there.
func TestLaunchResolvesInTheProcessMountNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN for a mount namespace)")
	}
	files := testFiles(t, 2, 256<<10)
	host, inner := files[0], files[1]
	// The process's namespace has inner's directory mounted over host's.
	script := "mount --bind " + filepath.Dir(inner) + " " + filepath.Dir(host) + " && exec sleep 30"
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Skip("unshare: ", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for {
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); filepath.Base(exe) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the namespaced process did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	root, err := source.ProcRoot(pid)
	if err != nil || root == "" {
		t.Fatalf("ProcRoot(%d) = %q, %v: want its /proc/PID/root", pid, root, err)
	}
	// What the process saw at host's path was inner's file.
	var st unix.Stat_t
	if err := unix.Stat(root+host, &st); err != nil {
		t.Fatal(err)
	}
	lf := launchFileOf(host, &st)
	p := &policies.LaunchProfile{Program: policies.LaunchFile{Path: "/usr/bin/sleep"}}
	p.AddLaunch(policies.Launch{Touches: []policies.LaunchTouch{{File: 0, Ranges: []policies.Range{{First: 0, N: 64}}}}}, []policies.LaunchFile{lf}, 5)
	evict(t, files)
	s := prefetchFor(t, p, pid, nil)
	if s.ProfileFiles.Checked != 1 {
		t.Fatalf("profile files %+v, want the file checked in the process's namespace", s.ProfileFiles)
	}
	if n := cached(t, inner); n < 60 {
		t.Errorf("the process's file has %d of 64 pages cached", n)
	}
	if n := cached(t, host); n != 0 {
		t.Errorf("this namespace's file at the same path has %d pages cached", n)
	}
}
