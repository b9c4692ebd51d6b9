package harness

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is what a figure was measured on.
type Machine struct {
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"` // uname -r
	CPU      string `json:"cpu"`    // model name
	CPUs     int    `json:"cpus"`
	MemBytes uint64 `json:"mem_bytes"`
	Go       string `json:"go"`
	// Commit is the predictio commit that measured ("" when unknown);
	// Dirty is set when the build had uncommitted changes.
	Commit string `json:"commit"`
	Dirty  bool   `json:"dirty,omitempty"`
}

// ThisMachine describes the running machine and predictio build.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	m.Kernel = KernelRelease()
	m.CPU = cpuModel()
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemBytes = uint64(si.Totalram) * uint64(si.Unit)
	}
	m.Commit, m.Dirty = Commit()
	return m
}

// KernelRelease returns uname -r.
func KernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Commit returns the predictio commit of this build: the VCS stamp go
// build embeds, else `git rev-parse HEAD` in the working directory or
// the executable's (go test builds, and builds with -buildvcs=false,
// carry no stamp).
func Commit() (rev string, dirty bool) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if rev != "" {
		return rev, dirty
	}
	dirs := []string{""}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	for _, d := range dirs {
		out, err := exec.Command("git", "-C", orDot(d), "rev-parse", "HEAD").Output()
		if err != nil {
			continue
		}
		st, _ := exec.Command("git", "-C", orDot(d), "status", "--porcelain", "--untracked-files=no").Output()
		return strings.TrimSpace(string(out)), len(strings.TrimSpace(string(st))) > 0
	}
	return "", false
}

func orDot(d string) string {
	if d == "" {
		return "."
	}
	return d
}
