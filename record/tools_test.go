package record_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tools are the programs the end-to-end tests of this file's package run:
// the predictio command (built from this tree) and C programs from
// testdata, built against hints/predictio_hints.h.
type tools struct {
	dir, predictio, gcc string
}

// buildTools builds predictio into a directory of its own under /var/tmp
// (a disk: the tests' bundles and data go there too). It skips without
// root (recording needs CAP_BPF and CAP_PERFMON) or without gcc or go.
func buildTools(tb testing.TB) *tools {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (CAP_BPF, CAP_PERFMON) to run predictio record")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		tb.Skip("needs gcc (no C compiler in PATH) to build the C programs of testdata")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("needs the go tool in PATH to build cmd/predictio")
	}
	dir, err := os.MkdirTemp("/var/tmp", "predictio-e2e-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tl := &tools{dir: dir, predictio: filepath.Join(dir, "predictio"), gcc: gcc}
	if out, err := exec.Command(goTool, "build", "-o", tl.predictio, "github.com/predictio/predictio/cmd/predictio").CombinedOutput(); err != nil {
		tb.Fatalf("build predictio: %v\n%s", err, out)
	}
	return tl
}

// cprog builds testdata/name.c (static, so that it maps no shared
// libraries) and returns its path.
func (tl *tools) cprog(tb testing.TB, name string) string {
	tb.Helper()
	bin := filepath.Join(tl.dir, name)
	if out, err := exec.Command(tl.gcc, "-O2", "-static", "-pthread", "-Wall", "-Werror", "-I", "../hints",
		"-o", bin, filepath.Join("testdata", name+".c")).CombinedOutput(); err != nil {
		tb.Fatalf("build testdata/%s.c: %v\n%s", name, err, out)
	}
	return bin
}

// waitStopped waits until pid shows the stopped state (T) in /proc.
func waitStopped(tb testing.TB, pid int) {
	tb.Helper()
	stat := "/proc/" + itoa(pid) + "/stat"
	for range 2000 {
		b, err := os.ReadFile(stat)
		if err != nil {
			tb.Fatal(err)
		}
		// pid (comm) S ...: the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
		time.Sleep(time.Millisecond)
	}
	tb.Fatalf("process %d not stopped 2 s after SIGSTOP", pid)
}

func itoa(n int) string { return strconv.Itoa(n) }
