package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/source"

	"github.com/predictio/predictio/internal/tracetest"
)

// TestMain doubles as the helper programs the tests record, and as a
// recorder to kill (crash_test.go).
func TestMain(m *testing.M) {
	if os.Getenv("PREDICTIO_RECORD_HELPER") == "recordkill" {
		os.Exit(helperRecord())
	}
	tracetest.Main(m)
}

// requireRecorder skips when the recorder cannot run here, naming why.
func requireRecorder(t testing.TB, tracepoints ...string) {
	t.Helper()
	if err := source.Check(tracepoints...); err != nil {
		if errors.Is(err, source.ErrPermission) || errors.Is(err, source.ErrNotSupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

type recorded struct {
	dir      string // the bundle
	sum      *Summary
	man      formats.Manifest
	files    []formats.File
	accesses []formats.Access
	hints    []formats.Hint
}

// record runs cfg into a bundle in a fresh directory and reads it back.
func record(t testing.TB, ctx context.Context, cfg Config) *recorded {
	t.Helper()
	r, err := recordE(t, ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// recordE is record for use off the test goroutine.
func recordE(t testing.TB, ctx context.Context, cfg Config) (*recorded, error) {
	if cfg.Output == "" {
		cfg.Output = filepath.Join(tracetest.DiskDir(t), "bundle")
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	sum, err := Run(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	t.Logf("%s", sum)
	if errs := formats.Verify(cfg.Output); len(errs) > 0 {
		return nil, fmt.Errorf("recorded bundle fails verification: %v", errs)
	}
	out := &recorded{dir: cfg.Output, sum: sum}
	b, err := formats.Open(cfg.Output)
	if err != nil {
		return nil, fmt.Errorf("open recorded bundle: %w", err)
	}
	defer b.Close()
	out.man = *b.Manifest()
	if out.files, err = b.Files(); err != nil {
		return nil, err
	}
	ac, err := b.Accesses()
	if err != nil {
		return nil, err
	}
	for ac.Next() {
		out.accesses = append(out.accesses, *ac.At())
	}
	if err := ac.Err(); err != nil {
		return nil, err
	}
	ac.Close()
	hc, err := b.Hints()
	if err != nil {
		return nil, err
	}
	for hc.Next() {
		h := *hc.At()
		h.Children = slices.Clone(h.Children)
		out.hints = append(out.hints, h)
	}
	if err := hc.Err(); err != nil {
		return nil, err
	}
	hc.Close()
	return out, nil
}

// fileID returns the id of path in files.arrow.
func (r *recorded) fileID(t testing.TB, path string) uint32 {
	t.Helper()
	for _, f := range r.files {
		if f.Path == path {
			return f.ID
		}
	}
	var paths []string
	for _, f := range r.files {
		paths = append(paths, f.Path)
	}
	t.Fatalf("%s not in files.arrow; files: %q", path, paths)
	return 0
}

// covered marks the pages of file id below npages that accesses of kind k
// cover, and counts those accesses.
func (r *recorded) covered(id uint32, k formats.AccessKind, npages int) (seen []bool, events int) {
	seen = make([]bool, npages)
	for _, a := range r.accesses {
		if a.FileID != id || a.Kind != k {
			continue
		}
		events++
		for p := a.FirstPage; p < a.FirstPage+uint64(a.NPages) && p < uint64(npages); p++ {
			seen[p] = true
		}
	}
	return seen, events
}

// coverage counts the pages of file id covered by accesses of kind k.
func (r *recorded) coverage(id uint32, k formats.AccessKind, npages int) (covered int, events int) {
	seen, events := r.covered(id, k, npages)
	for _, c := range seen {
		if c {
			covered++
		}
	}
	return covered, events
}

// checkReadRows checks that every read row of file id is a read system
// call's: an op of its own, its end after its start, and as many bytes
// (ret) as its pages can hold, at least one page's worth but the last's.
func checkReadRows(t *testing.T, r *recorded, id uint32) {
	t.Helper()
	ops := make(map[uint64]bool)
	for _, a := range r.accesses {
		if a.FileID != id || a.Kind != formats.KindRead {
			continue
		}
		if a.Op == 0 || a.EndNS < a.TS || a.Ret <= 0 {
			t.Fatalf("read row %+v is not a system call's (op, end >= start, ret > 0)", a)
		}
		if ops[a.Op] {
			t.Fatalf("two read rows share op %#x", a.Op)
		}
		ops[a.Op] = true
		if max := int64(a.NPages) * 4096; a.Ret > max || a.Ret <= max-2*4096 {
			t.Fatalf("read row of %d pages returned %d bytes", a.NPages, a.Ret)
		}
	}
	if !r.man.Timing.ServiceTimes || r.man.Timing.RecordedWallNS == 0 {
		t.Errorf("manifest timing %+v: want service times and a recorded wall", r.man.Timing)
	}
}

func TestScan(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages", "filemap:mm_filemap_add_to_page_cache")
	const size = 64 << 20
	dir := tracetest.DiskDir(t)
	npages := size / 4096
	// Reads are rows of their system calls: [pos, pos+ret) of each read(2),
	// from entry to exit. The page-cache lookups inside them (whose
	// tracepoint the kernel skips for a lookup that waited for a folio
	// under readahead I/O) are folded in, so a cold scan is covered
	// exactly, every page, by rows that each carry an op, an end after
	// their start and the bytes read.
	p := tracetest.ColdFile(t, dir, size)
	r := record(t, context.Background(), Config{Command: []string{"cat", p}})
	id := r.fileID(t, p)
	if c, n := r.coverage(id, formats.KindRead, npages); c != npages {
		t.Errorf("read rows cover %d of %d pages (%d rows)", c, npages, n)
	}
	checkReadRows(t, r, id)
	if c, n := r.coverage(id, formats.KindCacheAdd, npages); c != npages {
		t.Errorf("cache_add events cover %d of %d pages (%d events)", c, npages, n)
	}
	for _, f := range r.files {
		if f.ID == id && f.Size != size {
			t.Errorf("files.arrow size of %s = %d, want %d", p, f.Size, size)
		}
	}
	if r.sum.Dropped != 0 {
		t.Errorf("%d events dropped", r.sum.Dropped)
	}
	if !slices.Contains(r.man.Recording.EventSources, "filemap:mm_filemap_get_pages") &&
		!slices.Contains(r.man.Recording.EventSources, "kprobe:filemap_read") {
		t.Errorf("manifest event_sources %q lacks filemap:mm_filemap_get_pages and its fallback kprobe:filemap_read", r.man.Recording.EventSources)
	}
	// Readahead: a cold sequential scan starts with synchronous readahead
	// at page 0 and goes on asynchronously (PG_readahead hits), whichever
	// source of the kind was attached (tracepoint, or kprobe fallback).
	srcs := r.man.Recording.EventSources
	for _, ra := range []struct {
		kind   formats.AccessKind
		tp, kp string
	}{
		{formats.KindReadaheadSync, "readahead:page_cache_sync_ra", "kprobe:page_cache_sync_ra"},
		{formats.KindReadaheadAsync, "readahead:page_cache_async_ra", "kprobe:page_cache_async_ra"},
	} {
		if !slices.Contains(srcs, ra.tp) && !slices.Contains(srcs, ra.kp) {
			t.Logf("kernel has neither %s nor %s; %s not checked", ra.tp, ra.kp, ra.kind)
			continue
		}
		n, first := 0, false
		for _, a := range r.accesses {
			if a.FileID == id && a.Kind == ra.kind {
				n++
				first = first || a.FirstPage == 0
			}
		}
		if n == 0 {
			t.Errorf("no %s events for the cold scan", ra.kind)
		}
		if ra.kind == formats.KindReadaheadSync && !first {
			t.Errorf("%d %s events, none at page 0", n, ra.kind)
		}
	}
	if r.man.Counters.Events != uint64(len(r.accesses)) || r.man.Counters.Events == 0 {
		t.Errorf("manifest counts %d events, bundle has %d", r.man.Counters.Events, len(r.accesses))
	}
	for _, a := range r.accesses {
		if a.FileID == id && a.Comm != "cat" {
			t.Fatalf("access to %s by comm %q, want cat", p, a.Comm)
		}
		if a.TS < r.man.Start.MonotonicNS || a.TS > r.man.End.MonotonicNS {
			t.Fatalf("access ts %d outside recording [%d, %d]", a.TS, r.man.Start.MonotonicNS, r.man.End.MonotonicNS)
		}
	}
}

// TestScanByPid is TestScan's read check when a command is followed through
// the pid set (no cgroup v2): the command is held at exec until its pid is
// in the set, so no page is missed.
func TestScanByPid(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages")
	const size = 16 << 20
	p := tracetest.WarmFile(t, tracetest.DiskDir(t), size)
	r := record(t, context.Background(), Config{Command: []string{"cat", p}, noCgroup: true})
	if r.man.Recording.Target != "command" {
		t.Errorf("target %q", r.man.Recording.Target)
	}
	if c, n := r.coverage(r.fileID(t, p), formats.KindRead, size/4096); c != size/4096 {
		t.Errorf("read accesses cover %d of %d pages (%d events)", c, size/4096, n)
	}
}

func TestMmapFaults(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_fault")
	dir := tracetest.DiskDir(t)
	p := tracetest.ColdFile(t, dir, 16<<20)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := []string{"env", "PREDICTIO_RECORD_HELPER=mmap", "PREDICTIO_RECORD_FILE=" + p, exe}
	r := record(t, context.Background(), Config{Command: cmd, Stderr: os.Stderr})
	if r.sum.ExitCode != 0 {
		t.Fatalf("mmap helper exited with %d", r.sum.ExitCode)
	}
	id := r.fileID(t, p)
	var got []uint64
	for _, a := range r.accesses {
		if a.FileID == id && a.Kind == formats.KindFault {
			for i := uint64(0); i < uint64(a.NPages); i++ {
				got = append(got, a.FirstPage+i)
			}
		}
	}
	// A fault that must wait for I/O may be retried by the kernel, which
	// fires mm_filemap_fault again for the same page: one touch, reported
	// twice in a row. Compare the touches.
	got = slices.Compact(got)
	if !slices.Equal(got, tracetest.MmapPages) {
		t.Errorf("fault pages %v, want %v", got, tracetest.MmapPages)
	}
}

func TestDescendants(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(t)
	p := tracetest.WarmFile(t, dir, 4<<20)
	script := fmt.Sprintf("sh -c 'cat %s > /dev/null'; true", p)
	r := record(t, context.Background(), Config{Command: []string{"sh", "-c", script}})
	id := r.fileID(t, p)
	if c, n := r.coverage(id, formats.KindRead, 1024); c != 1024 {
		t.Errorf("grandchild's reads cover %d of 1024 pages (%d events)", c, n)
	}
}

// TestPIDDescendants follows --pid through fork: the shell is recorded by
// pid, and the cat it starts afterwards must be recorded too.
func TestPIDDescendants(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages", "sched:sched_process_fork")
	dir := tracetest.DiskDir(t)
	p := tracetest.WarmFile(t, dir, 4<<20)
	// The child is this test binary (busybox sh may run cat inside the
	// shell process), and it is not the last command (busybox sh execs
	// the last command of -c in place of the shell instead of forking).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", "read x; PREDICTIO_RECORD_HELPER=scan PREDICTIO_RECORD_FILE="+p+" "+exe+" > /dev/null; x=$?")
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	// A failure before the shell is let go must not leave it (and the
	// test) waiting for its stdin.
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	// Once the recorder is attached, let the shell go on.
	started := func() {
		go func() {
			in.Write([]byte("go\n"))
			in.Close()
			sh.Wait()
		}()
	}
	r := record(t, context.Background(), Config{PIDs: []int{sh.Process.Pid}, Duration: 20 * time.Second, onStart: started})
	id := r.fileID(t, p)
	if c, n := r.coverage(id, formats.KindRead, 1024); c != 1024 {
		t.Errorf("forked child's reads cover %d of 1024 pages (%d events)", c, n)
	}
	for _, a := range r.accesses {
		if a.FileID == id && a.PID == uint32(sh.Process.Pid) {
			t.Errorf("read of %s attributed to the shell (pid %d), want its child", p, a.PID)
			break
		}
	}
	if r.sum.Elapsed > 15*time.Second {
		t.Errorf("recording of --pid did not end when the process exited (%s)", r.sum.Elapsed)
	}
}

// TestExcludeFilter reads an excluded file 40 times: nothing of it is
// recorded, and once resolved the kernel drops its events itself.
// TestCgroupTarget records --cgroup: a shell moved into a fresh cgroup v2
// reads a file once the recorder is attached.
func TestCgroupTarget(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages")
	mnt := source.CgroupV2Mount()
	if mnt == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	cg, err := os.MkdirTemp(mnt, "predictio-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(cg)
	dir := tracetest.DiskDir(t)
	p := tracetest.WarmFile(t, dir, 2<<20)
	sh := exec.Command("sh", "-c", "echo $$ > "+cg+"/cgroup.procs; read x; cat "+p+" > /dev/null")
	in, _ := sh.StdinPipe()
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	// A failure before the shell is let go must not leave it (and the
	// test) waiting for its stdin.
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	started := func() { in.Write([]byte("go\n")); in.Close() }
	r := record(t, context.Background(), Config{Cgroup: cg, Duration: 2 * time.Second, onStart: started})
	id := r.fileID(t, p)
	if c, n := r.coverage(id, formats.KindRead, 512); c != 512 {
		t.Errorf("reads in the cgroup cover %d of 512 pages (%d events)", c, n)
	}
	if r.man.Recording.Target != "cgroup" {
		t.Errorf("manifest target %q, want cgroup", r.man.Recording.Target)
	}
}

func TestExcludeFilter(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(t)
	p := tracetest.ColdFile(t, dir, 1<<20)
	// Each read is a run of this test binary (a few ms), so the loop lasts
	// long enough for the deny entry to reach the kernel.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("i=0; while [ $i -lt 40 ]; do PREDICTIO_RECORD_HELPER=scan PREDICTIO_RECORD_FILE=%s %s > /dev/null; i=$((i+1)); done", p, exe)
	r := record(t, context.Background(), Config{Command: []string{"sh", "-c", script}, Exclude: []string{dir}})
	for _, a := range r.accesses {
		for _, f := range r.files {
			if f.ID == a.FileID && f.Path == p {
				t.Fatalf("excluded file %s recorded: %+v", p, a)
			}
		}
	}
	if r.sum.KernelFiltered == 0 {
		t.Errorf("no events filtered in the kernel (%d in user space)", r.sum.Filtered)
	}
}

// TestCommAndMinSize: --comm keeps only the named task's accesses, and
// --min-size drops files smaller than the limit. The named task is this
// test binary (comm "record.test"); the shell's own cat is left out.
func TestCommAndMinSize(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(t)
	big := tracetest.ColdFile(t, dir, 2<<20)
	small := filepath.Join(dir, "small.bin")
	if err := os.WriteFile(small, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	comm := filepath.Base(exe)
	if len(comm) > 15 {
		comm = comm[:15]
	}
	script := fmt.Sprintf("cat %s > /dev/null; PREDICTIO_RECORD_HELPER=scan PREDICTIO_RECORD_FILE=%s %s; PREDICTIO_RECORD_HELPER=scan PREDICTIO_RECORD_FILE=%s %s",
		big, big, exe, small, exe)
	r := record(t, context.Background(), Config{Command: []string{"sh", "-c", script}, Comm: []string{comm}, MinSize: 1 << 20})
	id := r.fileID(t, big)
	n := 0
	for _, a := range r.accesses {
		if a.Comm != comm {
			t.Fatalf("access by comm %q recorded with --comm %s", a.Comm, comm)
		}
		if a.FileID == id && a.Kind == formats.KindRead {
			n++
		}
		for _, f := range r.files {
			if f.ID == a.FileID && f.Path == small {
				t.Fatalf("file %s (8 KiB) recorded with --min-size 1M", small)
			}
		}
	}
	if n == 0 {
		t.Errorf("no reads of %s by %s", big, comm)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{Output: "x"},
		{Output: "x", All: true, PIDs: []int{1}},
		{All: true},
		{Output: "x", All: true, Comm: []string{"a-very-long-command-name"}},
		{Output: "x", All: true, Include: []string{"relative"}},
		{Output: "x", PIDs: []int{-1}},
	} {
		if err := c.validate(); err == nil {
			t.Errorf("validate(%+v) accepted", c)
		}
	}
}

// TestFailedStartLeavesNoBundle: the bundle is created while the programs
// load; when they fail to (here: a cgroup that does not exist), what its
// creation wrote is removed again, and an empty directory given as -o is
// left empty.
func TestFailedStartLeavesNoBundle(t *testing.T) {
	requireRecorder(t)
	dir := tracetest.DiskDir(t)
	out := filepath.Join(dir, "new")
	if _, err := Run(context.Background(), Config{Output: out, Cgroup: filepath.Join(dir, "no-such-cgroup")}); err == nil {
		t.Fatal("recording a missing cgroup succeeded")
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle directory %s left behind (%v)", out, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Config{Output: empty, Cgroup: filepath.Join(dir, "no-such-cgroup")}); err == nil {
		t.Fatal("recording a missing cgroup succeeded")
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Errorf("-o directory holds %d entries after a failed start (%v)", len(ents), err)
	}
}
