package live

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/internal/tracetest"
	"github.com/predictio/predictio/source"
)

// TestMain doubles as the programs the tests run (PREDICTIO_LIVE_HELPER).
func TestMain(m *testing.M) {
	switch os.Getenv("PREDICTIO_LIVE_HELPER") {
	case "":
		tracetest.Main(m)
	case "read":
		os.Exit(helperRead(false))
	case "probe":
		os.Exit(helperRead(true))
	case "signal":
		sig, _ := strconv.Atoi(os.Getenv("PREDICTIO_LIVE_SIGNAL"))
		_ = syscall.Kill(os.Getpid(), syscall.Signal(sig))
		time.Sleep(5 * time.Second)
		os.Exit(0)
	default:
		os.Exit(3)
	}
}

// helperRead reads the files of PREDICTIO_LIVE_FILES (separated by ':')
// to the end and exits with PREDICTIO_LIVE_EXIT. With probe it first
// waits PREDICTIO_LIVE_WAIT_MS and prints, for each file, "cached N of
// M" pages: what was prefetched before the program read anything.
func helperRead(probe bool) int {
	var files []string
	if v := os.Getenv("PREDICTIO_LIVE_FILES"); v != "" {
		files = strings.Split(v, ":")
	}
	if probe {
		ms, _ := strconv.Atoi(os.Getenv("PREDICTIO_LIVE_WAIT_MS"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		for _, p := range files {
			f, err := os.Open(p)
			if err != nil {
				fmt.Println("error", err)
				continue
			}
			var cs unix.Cachestat_t
			st, _ := f.Stat()
			if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0); err != nil {
				fmt.Println("error", err)
			}
			fmt.Printf("cached %d of %d\n", cs.Cache, (st.Size()+4095)/4096)
			f.Close()
		}
	}
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		_, _ = io.Copy(io.Discard, f)
		f.Close()
	}
	code, _ := strconv.Atoi(os.Getenv("PREDICTIO_LIVE_EXIT"))
	return code
}

// requireSource skips when the event source cannot run here, naming why.
func requireSource(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN)")
	}
	if err := source.Check(); err != nil {
		if errors.Is(err, source.ErrPermission) || errors.Is(err, source.ErrNotSupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

// testFiles makes n cold files of size bytes each in a fresh directory on
// disk.
func testFiles(t *testing.T, n, size int) []string {
	t.Helper()
	dir := tracetest.DiskDir(t)
	var out []string
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("f%d", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		out = append(out, tracetest.ColdFile(t, sub, size))
	}
	aged(t, out...)
	return out
}

// aged sets the files' times a second back: a launch does not learn a
// file modified within mtimeSlack before it began (ResolveLearned takes it
// for the launch's own output), which a file written just before a test's
// run would otherwise be, now and then, on a fast machine.
func aged(t *testing.T, paths ...string) {
	t.Helper()
	old := time.Now().Add(-time.Second)
	for _, p := range paths {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

// evict makes the files cold.
func evict(t *testing.T, files []string) {
	t.Helper()
	for _, f := range files {
		tracetest.Evict(t, f)
	}
}

// cached returns the cached pages of path.
func cached(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return tracetest.CachedPages(t, f)
}

// helperEnv sets the helper's environment for the commands the test runs.
func helperEnv(t *testing.T, mode string, files []string, kv ...string) {
	t.Setenv("PREDICTIO_LIVE_HELPER", mode)
	t.Setenv("PREDICTIO_LIVE_FILES", strings.Join(files, ":"))
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// probed parses the probe helper's "cached N of M" lines.
func probed(t *testing.T, out string) (cached, total []uint64) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var c, m uint64
		if _, err := fmt.Sscanf(line, "cached %d of %d", &c, &m); err != nil {
			t.Fatalf("probe output %q: %v", out, err)
		}
		cached, total = append(cached, c), append(total, m)
	}
	return cached, total
}
