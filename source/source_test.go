package source

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
)

// TestMain doubles as the helper programs the tests trace.
func TestMain(m *testing.M) { tracetest.Main(m) }

// requireSource skips when a Source cannot run here, naming why.
func requireSource(t testing.TB, tracepoints ...string) {
	t.Helper()
	if err := Check(tracepoints...); err != nil {
		if errors.Is(err, ErrPermission) || errors.Is(err, ErrNotSupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

// collector keeps copies of everything delivered, and checks the Batch
// contract as it goes: every file id an access or hint names was in the
// Files of this batch or an earlier one.
type collector struct {
	mu       sync.Mutex
	files    map[uint32]formats.File
	accesses []formats.Access
	hints    []formats.Hint
	batches  int
	orphans  []uint32 // file ids named before their row was delivered
	arrived  []uint64 // monotonic delivery time of each access
	onAccess func(a *formats.Access)
}

func newCollector() *collector { return &collector{files: make(map[uint32]formats.File)} }

func (c *collector) Consume(b *Batch) error {
	now := monoNow()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches++
	for _, f := range b.Files {
		if _, dup := c.files[f.ID]; dup {
			return fmt.Errorf("file id %d delivered twice", f.ID)
		}
		c.files[f.ID] = f
	}
	for i := range b.Accesses {
		a := b.Accesses[i]
		if _, ok := c.files[a.FileID]; !ok {
			c.orphans = append(c.orphans, a.FileID)
		}
		c.accesses = append(c.accesses, a)
		c.arrived = append(c.arrived, now)
		if c.onAccess != nil {
			c.onAccess(&a)
		}
	}
	for _, h := range b.Hints {
		if _, ok := c.files[h.FileID]; !ok {
			c.orphans = append(c.orphans, h.FileID)
		}
		h.Children = slices.Clone(h.Children)
		h.Name = strings.Clone(h.Name)
		c.hints = append(c.hints, h)
	}
	return nil
}

// idOf returns the id of the delivered file at path, or false.
func (c *collector) idOf(src *Source, path string) (uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.files {
		if f, ok := src.File(id); ok && f.Path == path {
			return id, true
		}
	}
	return 0, false
}

// pages counts the distinct pages of file id covered by accesses of kind k.
func (c *collector) pages(id uint32, k formats.AccessKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[uint64]bool)
	for _, a := range c.accesses {
		if a.FileID == id && a.Kind == k {
			for p := a.FirstPage; p < a.FirstPage+uint64(a.NPages); p++ {
				seen[p] = true
			}
		}
	}
	return len(seen)
}

// open opens a Source with a private BTF cache and starts it into a new
// collector; Close runs at cleanup.
func open(t *testing.T, cfg Config) (*Source, *collector) {
	t.Helper()
	if cfg.BTFCacheDir == "" {
		cfg.BTFCacheDir = t.TempDir()
	}
	src, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	c := newCollector()
	if err := src.Start(c); err != nil {
		t.Fatal(err)
	}
	return src, c
}

// TestBatchFilesFirst traces a command that reads three files: each file's
// row arrives in the batch of its first access or earlier, with its path.
func TestBatchFilesFirst(t *testing.T) {
	requireSource(t, "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(t)
	var paths []string
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(p, make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	src, c := open(t, Config{Command: true})
	cmd := exec.Command("cat", paths...)
	if err := src.StartCommand(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	src.Stop()
	if len(c.orphans) > 0 {
		t.Errorf("accesses name file ids %v before any batch delivered their rows", c.orphans)
	}
	if _, ok := c.files[0]; ok {
		t.Errorf("a file got id 0, which a hint's file_id reserves for \"no file\"")
	}
	for _, p := range paths {
		id, ok := c.idOf(src, p)
		if !ok {
			t.Fatalf("no row for %s", p)
		}
		if n := c.pages(id, formats.KindRead); n != 16 {
			t.Errorf("%s: read accesses cover %d of 16 pages", p, n)
		}
		if f := c.files[id]; f.Path != p || f.Size != 64<<10 {
			t.Errorf("delivered row %+v, want path %s and size %d", f, p, 64<<10)
		}
	}
	if st := src.Stats(); st.Events != uint64(len(c.accesses)) {
		t.Errorf("Stats.Events %d, delivered %d", st.Events, len(c.accesses))
	}
}

// TestAddRemovePID adds a running process as a target and removes it again:
// only what it reads in between is traced.
func TestAddRemovePID(t *testing.T) {
	requireSource(t, "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(t)
	a := tracetest.WarmFile(t, dir, 1<<20)
	b := filepath.Join(dir, "b.bin")
	if err := os.WriteFile(b, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	src, c := open(t, Config{})
	// Reads a on the first line, b on the second.
	sh := exec.Command("sh", "-c", "read x; cat "+a+" > /dev/null; echo; read y; cat "+b+" > /dev/null")
	in, _ := sh.StdinPipe()
	out, _ := sh.StdoutPipe()
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	// A failure before the shell is let go must not leave it (and the
	// test) waiting for its stdin.
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	if err := src.AddPID(sh.Process.Pid); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("1\n"))
	io.ReadFull(out, make([]byte, 1)) // a has been read
	if err := src.RemovePID(sh.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// cat of b is forked after the removal, so it is not in the set.
	in.Write([]byte("2\n"))
	in.Close()
	sh.Wait()
	src.Stop()
	ida, ok := c.idOf(src, a)
	if !ok {
		t.Fatalf("nothing of %s (read while a target) was traced", a)
	}
	if n := c.pages(ida, formats.KindRead); n != 256 {
		t.Errorf("%s: %d of 256 pages traced", a, n)
	}
	if _, ok := c.idOf(src, b); ok {
		t.Errorf("%s was read after RemovePID and traced", b)
	}
	if err := src.RemovePID(sh.Process.Pid); err != nil {
		t.Errorf("removing a pid twice: %v", err)
	}
}

// TestAddCgroupWhileRunning adds a cgroup after Start: a process moved into
// it is traced.
func TestAddCgroupWhileRunning(t *testing.T) {
	requireSource(t, "filemap:mm_filemap_get_pages")
	mnt := cgroup2Mount()
	if mnt == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	cg, err := os.MkdirTemp(mnt, "predictio-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(cg)
	dir := tracetest.DiskDir(t)
	p := tracetest.WarmFile(t, dir, 1<<20)
	src, c := open(t, Config{})
	if err := src.AddCgroup(cg); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", "echo $$ > "+cg+"/cgroup.procs; cat "+p+" > /dev/null")
	if err := sh.Run(); err != nil {
		t.Fatal(err)
	}
	if err := src.RemoveCgroup(cg); err != nil {
		t.Fatal(err)
	}
	src.Stop()
	id, ok := c.idOf(src, p)
	if !ok || c.pages(id, formats.KindRead) != 256 {
		t.Fatalf("reads in the added cgroup not traced (found %v)", ok)
	}
}

// TestExecAll reports the execs of processes that are no target, and
// AddExecTarget makes the process that execs a file a target from its
// exec on.
func TestExecAll(t *testing.T) {
	requireSource(t, "sched:sched_process_exec", "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(t)
	data := tracetest.WarmFile(t, dir, 1<<20)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy of this test binary, so that only the helper's exec matches.
	prog := filepath.Join(dir, "scanner")
	if err := copyFile(exe, prog); err != nil {
		t.Fatal(err)
	}
	src, c := open(t, Config{Exec: ExecAll})
	if err := src.AddExecTarget(prog); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Fatal(err)
	}
	scan := exec.Command(prog)
	scan.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER=scan", "PREDICTIO_RECORD_FILE="+data)
	if err := scan.Run(); err != nil {
		t.Fatal(err)
	}
	src.Stop()
	var execs []string
	var files []formats.File
	for _, a := range c.accesses {
		if a.Kind == KindExec {
			f, _ := src.File(a.FileID)
			execs, files = append(execs, f.Path), append(files, f)
			if a.NPages != 0 {
				t.Errorf("exec row with %d pages", a.NPages)
			}
		}
	}
	// true may be a link (to busybox, say): compare files, not names.
	execed := func(path string) bool {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(files, func(f formats.File) bool {
			return f.Ino == st.Ino && f.Dev == formats.KernelDev(st.Dev)
		})
	}
	truePath, _ := exec.LookPath("true")
	if !execed(truePath) {
		t.Errorf("execs %q lack the untraced %s", execs, truePath)
	}
	if !execed(prog) || !slices.Contains(execs, prog) {
		t.Errorf("execs %q lack %s", execs, prog)
	}
	id, ok := c.idOf(src, data)
	if !ok || c.pages(id, formats.KindRead) != 256 {
		t.Fatalf("the exec target's reads of %s were not traced (found %v)", data, ok)
	}
	for _, a := range c.accesses {
		if a.Kind != KindExec && a.Comm == "true" {
			t.Fatalf("true (no target) traced: %+v", a)
		}
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// TestLowLatencyDelivers checks that LowLatency mode delivers an event when
// it happens, not at the reader's poll: with the poll set to an hour, the
// read of one warm page reaches the consumer in LowLatency mode, and (the
// control) not in Batched mode; with a 2 ms poll (Config.Poll) Batched
// mode delivers it too.
func TestLowLatencyDelivers(t *testing.T) {
	requireSource(t, "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(t)
	p := tracetest.WarmFile(t, dir, 4096)
	for _, tc := range []struct {
		mode Latency
		poll time.Duration
	}{{LowLatency, time.Hour}, {Batched, time.Hour}, {Batched, 2 * time.Millisecond}} {
		mode, quick := tc.mode, tc.poll < time.Second
		src, c := open(t, Config{Command: true, Latency: mode, Poll: tc.poll})
		got := make(chan struct{}, 1)
		c.mu.Lock()
		c.onAccess = func(a *formats.Access) {
			select {
			case got <- struct{}{}:
			default:
			}
		}
		c.mu.Unlock()
		// The reader never sees the program end: it waits on stdin.
		sh := exec.Command("sh", "-c", "head -c 1 "+p+" > /dev/null; read x")
		in, _ := sh.StdinPipe()
		if err := src.StartCommand(sh); err != nil {
			t.Fatal(err)
		}
		wait := 5 * time.Second
		if mode == Batched && !quick {
			wait = 500 * time.Millisecond
		}
		select {
		case <-got:
			if mode == Batched && !quick {
				t.Errorf("Batched mode delivered before its poll (the control): the test cannot tell the modes apart")
			}
		case <-time.After(wait):
			if mode == LowLatency || quick {
				t.Errorf("mode %v, poll %s: the read was not delivered within %s", mode, tc.poll, wait)
			}
		}
		in.Close()
		sh.Wait()
		src.Close()
	}
}

// TestBatchedPollDoesNotSpin: a Batched reader with a 1 ms poll sleeps
// while its rings are empty. Waiting on a read deadline instead, it spun:
// the ring's poller rounds the time left down to whole milliseconds, 0
// here, so the reader took a whole CPU for as long as the command ran.
// Waking it every millisecond regardless would cost it 34 ms of CPU here
// but 408 ms in the TCG guest of kmod/vmtest, where a wakeup is slow.
func TestBatchedPollDoesNotSpin(t *testing.T) {
	requireSource(t, "filemap:mm_filemap_get_pages")
	src, _ := open(t, Config{Command: true, Latency: Batched, Poll: time.Millisecond})
	cmd := exec.Command("sleep", "1")
	if err := src.StartCommand(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	src.Stop()
	if cpu := src.Stats().ReaderCPU; cpu > 250*time.Millisecond {
		t.Errorf("the reader used %v of CPU over a 1 s command with a 1 ms poll: it spins", cpu)
	} else {
		t.Logf("reader CPU over 1 s with a 1 ms poll: %v", cpu)
	}
}

func TestProbeAccessSources(t *testing.T) {
	dir := t.TempDir()
	_, missing, err := probeAccessSources(dir, nil)
	if !errors.Is(err, ErrNotSupported) || len(missing) != len(accessSources) {
		t.Fatalf("no tracepoints: err %v, missing %v", err, missing)
	}
	for _, s := range accessSources {
		if !strings.Contains(err.Error(), s.group+":"+s.name) {
			t.Errorf("error %q does not name %s:%s", err, s.group, s.name)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "filemap", "mm_filemap_get_pages"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "filemap", "mm_filemap_get_pages", "id"), []byte("1\n"), 0o644)
	present, missing, err := probeAccessSources(dir, nil)
	if err != nil || len(present) != 1 || present[0].name != "mm_filemap_get_pages" || len(missing) != len(accessSources)-1 {
		t.Errorf("one tracepoint: present %v, missing %v, err %v", present, missing, err)
	}
	// Kprobe fallback: the tracepoint wins where it exists; a missing
	// tracepoint whose function can be probed is attached as a kprobe.
	present, missing, err = probeAccessSources(dir, func(fn string) bool { return fn == "filemap_read" || fn == "filemap_fault" })
	var names []string
	for _, p := range present {
		names = append(names, p.String())
	}
	if err != nil || !slices.Equal(names, []string{"filemap:mm_filemap_get_pages", "kprobe:filemap_fault"}) || len(missing) != len(accessSources)-2 {
		t.Errorf("kprobe fallback: present %v, missing %v, err %v", names, missing, err)
	}
	for _, m := range missing {
		if strings.Contains(m, "map_pages") && !strings.Contains(m, "kprobe filemap_map_pages") {
			t.Errorf("missing %q does not name the kprobe fallback", m)
		}
	}
}

func TestMissingCaps(t *testing.T) {
	all := uint64(1)<<capBPF | 1<<capPerfmon | 1<<capSysAdmin
	if m := missingCaps(all, true); len(m) != 0 {
		t.Errorf("all caps: missing %v", m)
	}
	if m := missingCaps(0, true); !slices.Equal(m, []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN"}) {
		t.Errorf("no caps: missing %v", m)
	}
	if m := missingCaps(1<<capSysAdmin, true); len(m) != 0 {
		t.Errorf("CAP_SYS_ADMIN alone: missing %v", m)
	}
	if m := missingCaps(1<<capBPF, false); !slices.Equal(m, []string{"CAP_PERFMON"}) {
		t.Errorf("CAP_BPF alone: missing %v", m)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{PIDs: []int{-1}},
		{Comm: []string{"a-very-long-command-name"}},
		{Include: []string{"relative"}},
		{RingBytes: 1000},
		{Cgroups: []string{"/a", "/b", "/c", "/d", "/e"}},
		{Command: true, Cgroups: []string{"/a", "/b", "/c", "/d"}},
		{Latency: 7},
	} {
		if err := c.validate(); err == nil {
			t.Errorf("validate(%+v) accepted", c)
		}
	}
}

// TestPauseResume: while paused, a target's reads are not traced (the
// access and system call programs are detached) but its children are
// still followed: after Resume, a child forked while paused is traced.
func TestPauseResume(t *testing.T) {
	requireSource(t, "filemap:mm_filemap_get_pages", "sched:sched_process_fork")
	dir := tracetest.DiskDir(t)
	a := tracetest.WarmFile(t, dir, 1<<20)
	b := filepath.Join(dir, "b.bin")
	if err := os.WriteFile(b, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	src, c := open(t, Config{})
	// The shell reads a (paused), then forks a subshell that waits and
	// reads b (resumed).
	sh := exec.Command("sh", "-c", "read x; cat "+a+" > /dev/null; (echo; read y; cat "+b+" > /dev/null)")
	in, _ := sh.StdinPipe()
	out, _ := sh.StdoutPipe()
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	if err := src.AddPID(sh.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := src.Pause(); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("1\n"))
	io.ReadFull(out, make([]byte, 1)) // a is read, the subshell forked
	if err := src.Resume(); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("2\n"))
	in.Close()
	if err := sh.Wait(); err != nil {
		t.Fatal(err)
	}
	src.Stop()
	if _, ok := c.idOf(src, a); ok {
		t.Errorf("%s was read while paused and traced", a)
	}
	id, ok := c.idOf(src, b)
	if !ok || c.pages(id, formats.KindRead) != 256 {
		t.Errorf("%s, read by a child forked while paused, after Resume: traced %v", b, ok)
	}
}

// TestCloseUnderTicks closes Batched sources while their poll ticks and a
// traced command fills the rings: the ticker's goroutine must be gone
// before Close closes the rings it looks at (it dereferenced a closed
// reader in one of three short daemon tests before it was waited for).
// A plain run rarely hits the window; with -race (scripts/test.sh) it
// fails every time without the wait.
func TestCloseUnderTicks(t *testing.T) {
	requireSource(t, "filemap:mm_filemap_get_pages")
	cache := t.TempDir()
	for range 20 {
		src, err := Open(Config{Command: true, Latency: Batched, Poll: minPoll, BTFCacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Start(newCollector()); err != nil {
			t.Fatal(err)
		}
		// A bounded loop: a test that dies mid-way leaves no shell
		// spinning behind it.
		cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 500 ]; do cat /etc/passwd /etc/group; i=$((i+1)); done >/dev/null")
		if err := src.StartCommand(cmd); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		src.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}
}
