package launchbench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DaemonConfig is what a benchmark's daemon configuration sets
// (docs/daemon.md); the rest keeps the daemon's defaults.
type DaemonConfig struct {
	ProfileDir string
	Socket     string   // the status socket
	Metrics    string   // the /metrics address; "" turns it off
	Programs   []string // resolved executables the daemon learns
	Launches   int      // launches each profile keeps
	Noop       bool     // no policies: the daemon learns and prefetches nothing
}

// Write writes the configuration file path.
func (c DaemonConfig) Write(path string) error {
	keys := make([]string, len(c.Programs))
	for i, p := range c.Programs {
		keys[i] = strconv.Quote(p)
	}
	slices.Sort(keys)
	policies := ""
	if c.Noop {
		policies = "policies = []\n"
	}
	body := fmt.Sprintf("profile_dir = %q\nsocket = %q\nmetrics = %q\n%s[learn]\nprograms = [%s]\nwindow = \"30s\"\nlaunches = %d\n",
		c.ProfileDir, c.Socket, c.Metrics, policies, strings.Join(keys, ", "), c.Launches)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		return fmt.Errorf("write daemon config: %w", err)
	}
	return nil
}

// Executable resolves a command name as the daemon keys its profiles: the
// absolute path of the file it runs, symbolic links followed.
func Executable(name string) (string, error) {
	exe, err := exec.LookPath(name)
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err == nil {
		exe, err = filepath.Abs(exe)
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", name, err)
	}
	return exe, nil
}

// Daemon is `predictio daemon` running in the foreground for a benchmark.
type Daemon struct {
	cmd *exec.Cmd
}

// StartDaemon starts bin's daemon with the configuration file config,
// its output appended to logPath, and waits up to 30 s until its status
// socket answers.
func StartDaemon(bin, config, socket, logPath string) (*Daemon, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	cmd := exec.Command(bin, "daemon", "--config", config)
	cmd.Stdout, cmd.Stderr = log, log
	err = cmd.Start()
	log.Close()
	if err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	d := &Daemon{cmd: cmd}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(bin, "daemon", "status", "--socket", socket).CombinedOutput()
		if err == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.Stop()
			return nil, fmt.Errorf("start the daemon: it did not answer on %s in 30 s: %s (see %s)", socket, strings.TrimSpace(string(out)), logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the daemon (SIGTERM) and waits for it; a nil Daemon is a
// no-op.
func (d *Daemon) Stop() {
	if d == nil || d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	d.cmd = nil
}

// ReadBytes is what the daemon process has read from storage
// (read_bytes of /proc/PID/io); 0 when it is not running.
func (d *Daemon) ReadBytes() uint64 {
	if d == nil || d.cmd == nil {
		return 0
	}
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "io"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "read_bytes: "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
