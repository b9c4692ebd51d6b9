package replay

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/blockdev"
)

const mtime = 1_700_000_000_000_000_000

// bundle11 writes a format 1.1 bundle with files and rows, with service
// times when serviceTimes, and materializes it.
func bundle11(t testing.TB, files []formats.File, rows []formats.Access, serviceTimes bool) (bundle, root string) {
	t.Helper()
	dir := scratchDir(t)
	bundle, root = filepath.Join(dir, "bundle"), filepath.Join(dir, "files")
	w, err := formats.Create(bundle)
	if err != nil {
		t.Fatal(err)
	}
	w.Manifest().Timing.ServiceTimes = serviceTimes
	for _, f := range files {
		if err := w.AddFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range rows {
		if err := w.Append(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Materialize(bundle, root); err != nil {
		t.Fatal(err)
	}
	return bundle, root
}

func replayBundle(t *testing.T, bundle string, opt Options) *Report {
	t.Helper()
	r, err := New(bundle, opt)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Replay(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestServiceTimes: with service times, a thread waits its recorded think
// time after its previous access completes here, so a replay whose
// accesses are faster than the recorded ones is faster too; without them
// (the fallback, said in the report) it waits the whole recorded gap. The
// timing error compares the baseline's wall with the recorded one.
func TestServiceTimes(t *testing.T) {
	const n = 40
	const gap, service = 10 * time.Millisecond, 8 * time.Millisecond
	files := []formats.File{{ID: 1, Dev: 1, Ino: 1, Path: "/data/a.bin", Size: 64 * 4096, MtimeNS: mtime, Mode: formats.ModeRegular | 0o644}}
	for _, withTimes := range []bool{true, false} {
		var rows []formats.Access
		for i := 0; i < n; i++ {
			ts := uint64(time.Second) + uint64(i)*uint64(gap)
			a := formats.Access{TS: ts, PID: 10, TID: 10, FileID: 1, FirstPage: uint64(i), NPages: 1, Kind: formats.KindRead, Op: uint64(i + 1)}
			if withTimes {
				a.EndNS = ts + uint64(service)
			}
			rows = append(rows, a)
		}
		bundle, root := bundle11(t, files, rows, withTimes)
		rep := replayBundle(t, bundle, Options{Root: root, Backend: BackendNone})
		wall := time.Duration(rep.Runs[0].WallNS)
		rec := time.Duration(rep.Summary.RecordedWallNS)
		t.Logf("service times %v: recorded wall %v, replay wall %v, timing error %v (%s) %s", withTimes, rec, wall, *rep.Summary.TimingError, rep.Summary.TimingNote, rep.TimingFallback)
		if withTimes {
			if want := time.Duration(n-1)*gap + service; rec != want {
				t.Fatalf("recorded wall %v, want %v", rec, want)
			}
			// 40 think times of 2 ms and 40 cold reads of one page.
			if wall > rec*6/10 || rep.TimingFallback != "" || !rep.ServiceTimes {
				t.Fatalf("replay wall %v with service times (recorded %v); want well under the recorded gaps, and no fallback note (%q)", wall, rec, rep.TimingFallback)
			}
		} else {
			if wall < time.Duration(n-1)*gap || rep.TimingFallback == "" || rep.ServiceTimes {
				t.Fatalf("replay wall %v without service times; want at least the %v of recorded gaps, and the fallback note", wall, time.Duration(n-1)*gap)
			}
		}
		e := *rep.Summary.TimingError
		if want := (float64(wall) - float64(rec)) / float64(rec); e-abs(want) > 1e-9 || abs(want)-e > 1e-9 {
			t.Errorf("timing error %v, want |%v - %v| / %v = %v", e, wall, rec, rec, abs(want))
		}
		if rep.Summary.TimingTarget {
			t.Errorf("timing target applies under --root")
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestOpMerging: the rows of one recorded operation (the batches of one
// read, a fault that retried) are replayed as one access of their pages.
func TestOpMerging(t *testing.T) {
	files := []formats.File{{ID: 1, Dev: 1, Ino: 1, Path: "/data/a.bin", Size: 128 * 4096, MtimeNS: mtime, Mode: formats.ModeRegular}}
	rows := []formats.Access{
		{TS: 1000, EndNS: 5000, TID: 1, PID: 1, FileID: 1, FirstPage: 0, NPages: 32, Kind: formats.KindRead, Op: 7},
		{TS: 1000, EndNS: 5000, TID: 1, PID: 1, FileID: 1, FirstPage: 32, NPages: 32, Kind: formats.KindRead, Op: 7},
		{TS: 6000, EndNS: 9000, TID: 1, PID: 1, FileID: 1, FirstPage: 100, NPages: 1, Kind: formats.KindFault, Op: 8, Prot: formats.ProtRead, MapPages: 128},
		{TS: 6000, EndNS: 9000, TID: 1, PID: 1, FileID: 1, FirstPage: 100, NPages: 1, Kind: formats.KindFault, Op: 8, Prot: formats.ProtRead, MapPages: 128},
		{TS: 9500, EndNS: 9600, TID: 1, PID: 1, FileID: 1, FirstPage: 120, NPages: 1, Kind: formats.KindRead, Op: 9},
	}
	bundle, root := bundle11(t, files, rows, true)
	r, err := New(bundle, Options{Root: root, Backend: BackendNone, Timing: TimingASAP})
	if err != nil {
		t.Fatal(err)
	}
	ops := r.t.threads[0].ops
	if r.Accesses() != 3 || len(ops) != 3 || ops[0].n != 64 || ops[1].n != 1 || !ops[1].fault || r.t.pages != 66 {
		t.Fatalf("merged ops %+v (%d accesses, %d pages); want a 64-page read, a one-page fault and a one-page read", ops, r.Accesses(), r.t.pages)
	}
	rep, err := r.Replay(context.Background())
	if err != nil || len(rep.Runs[0].Latencies()) != 3 {
		t.Fatalf("replay: %v, %d latencies", err, len(rep.Runs[0].Latencies()))
	}
}

// TestMetadataReplay: opens, stats and directory reads are replayed through
// the same paths; a file the recording opened before reading it is opened
// by that open, not before the run; lookups that failed in the recording
// (path-only rows) fail again and are no mismatch, a file the replay lacks
// is one; dentries and inodes are dropped before the run as root.
func TestMetadataReplay(t *testing.T) {
	dirMode, reg := formats.ModeDir|0o755, formats.ModeRegular|0o644
	files := []formats.File{
		{ID: 1, Dev: 1, Ino: 10, Path: "/d", Mode: dirMode, MtimeNS: mtime},
		{ID: 2, Dev: 1, Ino: 11, Path: "/d/a", Size: 16 * 4096, Mode: reg, MtimeNS: mtime},
		{ID: 3, Dev: 1, Ino: 12, Path: "/d/b", Size: 1 << 30, Mode: reg, MtimeNS: mtime},
		{ID: 4, Path: "/d/missing"}, // path-only: the program's lookup failed
		{ID: 5, Dev: 1, Ino: 13, Path: "/d/gone", Size: 4096, Mode: reg, MtimeNS: mtime},
	}
	ms := uint64(time.Millisecond)
	row := func(i int, kind formats.AccessKind, file uint32, ret int64) formats.Access {
		return formats.Access{TS: uint64(i) * ms, EndNS: uint64(i)*ms + ms/2, TID: 1, PID: 1, FileID: file, Kind: kind, Ret: ret, Op: uint64(i)}
	}
	rows := []formats.Access{
		row(1, formats.KindReaddir, 1, 96),
		row(2, formats.KindOpen, 2, 3),
		row(3, formats.KindStat, 3, 0),
		row(4, formats.KindStat, 4, -int64(unix.ENOENT)),
		row(5, formats.KindOpen, 5, 4),
	}
	read := row(6, formats.KindRead, 2, 4*4096)
	read.NPages = 4
	rows = append(rows, read)
	bundle, root := bundle11(t, files, rows, true)
	if st, err := os.Stat(filepath.Join(root, "d/b")); err != nil || st.Size() != 1<<30 {
		t.Fatalf("stat-only file not materialized with its size: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "d/missing")); !os.IsNotExist(err) {
		t.Fatalf("path-only row materialized: %v", err)
	}
	os.Remove(filepath.Join(root, "d/gone"))

	r, err := New(bundle, Options{Root: root, Backend: BackendNone})
	if err != nil {
		t.Fatal(err)
	}
	if !r.t.files[1].opened || r.t.files[2].accessed {
		t.Fatalf("file /d/a not marked opened by the recording, or /d/b marked accessed")
	}
	rep, err := r.Replay(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	run := rep.Runs[0]
	m := run.Metadata
	if m == nil || m.Ops != 5 || m.Mismatched != 1 || m.Skipped != 0 {
		t.Fatalf("metadata %+v; want 5 operations, 1 mismatch (the removed file)", m)
	}
	if run.Accesses != 1 || rep.MetadataOps != 5 {
		t.Fatalf("%d accesses, %d metadata ops in the report", run.Accesses, rep.MetadataOps)
	}
	if os.Geteuid() == 0 && !strings.Contains(m.Cold, "drop_caches 2") {
		t.Errorf("as root, dentries and inodes not dropped: %+v", m)
	}
	t.Logf("metadata: %+v", m)
}

// TestLazyOpen: the run opens a file the recording opened when it replays
// that open, not before the clock starts; a demand access that comes first
// (another thread's) opens it itself. The replayed open is only the
// open(2): checking and installing the descriptor waits until its time was
// taken (settle), so a replayed open costs what the program's did.
func TestLazyOpen(t *testing.T) {
	files := []formats.File{{ID: 2, Dev: 1, Ino: 11, Path: "/d/a", Size: 16 * 4096, Mode: formats.ModeRegular, MtimeNS: mtime}}
	ms := uint64(time.Millisecond)
	rows := []formats.Access{
		{TS: 1 * ms, EndNS: 2 * ms, TID: 1, PID: 1, FileID: 2, Kind: formats.KindOpen, Ret: 3, Op: 1},
		{TS: 3 * ms, EndNS: 4 * ms, TID: 1, PID: 1, FileID: 2, FirstPage: 0, NPages: 2, Kind: formats.KindRead, Op: 2},
	}
	bundle, root := bundle11(t, files, rows, true)
	w, files2, r := metaWorker(t, bundle, root)
	f := files2[r.t.byID[2].idx]
	if !f.lazy || f.ready.Load() {
		t.Fatalf("file the recording opened was opened before the run (lazy %v, open %v)", f.lazy, f.ready.Load())
	}
	w.metadata(&r.t.threads[0].ops[0], files2)
	if f.ready.Load() {
		t.Fatalf("the replayed open installed the file's descriptor within its timed operation")
	}
	w.settle(files2)
	if !f.ready.Load() || f.early {
		t.Fatalf("the replayed open did not become the file's descriptor (open %v, early %v)", f.ready.Load(), f.early)
	}
	if _, err := r.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestExecMapping: a fault is replayed through a mapping of the recorded
// range with the recorded protection, so the kernel takes the same fault
// path: on Linux 6.16+ a PROT_EXEC mapping reads ahead from the faulting
// page (and no further than the mapping), a PROT_READ one reads around it.
func TestExecMapping(t *testing.T) {
	var u unix.Utsname
	unix.Uname(&u)
	rel := unix.ByteSliceToString(u.Release[:])
	if maj, min := kernelVersion(rel); maj < 6 || maj == 6 && min < 16 {
		t.Skipf("kernel %s: the exec-mapping readahead path this test tells apart needs Linux 6.16", rel)
	}
	const pages, fault = 8192, 5000
	for _, tc := range []struct {
		name        string
		prot        uint8
		first, n    uint64
		before      bool // page fault-700 resident after the fault
		afterLimit  uint64
		wantPastMap bool
	}{
		{"read", formats.ProtRead, 0, pages, true, 0, false},
		{"exec", formats.ProtRead | formats.ProtExec, 0, pages, false, 0, false},
		{"exec within a small mapping", formats.ProtRead | formats.ProtExec, 4990, 110, false, 5100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := []formats.File{{ID: 1, Dev: 1, Ino: 1, Path: "/lib/x.so", Size: pages * 4096, MtimeNS: mtime, Mode: formats.ModeRegular | 0o755}}
			rows := []formats.Access{{TS: 1000, EndNS: 2000, TID: 1, PID: 1, FileID: 1, FirstPage: fault, NPages: 1, Kind: formats.KindFault, Op: 1,
				Prot: tc.prot, MapFirstPage: tc.first, MapPages: tc.n}}
			bundle, root := bundle11(t, files, rows, true)
			ra := readaheadPages(t, filepath.Join(root, "lib/x.so"))
			if ra < 1024 {
				t.Skipf("read_ahead_kb gives %d pages; the read path's window would not reach %d pages before the fault", ra, 700)
			}
			rep := replayBundle(t, bundle, Options{Root: root, Backend: BackendNone, Timing: TimingASAP})
			if w := rep.Runs[0].Warnings; len(w) > 0 {
				t.Fatalf("warnings: %v", w)
			}
			res := residentAfter(t, filepath.Join(root, "lib/x.so"), pages)
			if res[fault] == 0 {
				t.Fatalf("faulting page not resident")
			}
			if got := res[fault-700] != 0; got != tc.before {
				t.Errorf("page %d (700 before the fault) resident: %v, want %v", fault-700, got, tc.before)
			}
			if tc.afterLimit > 0 {
				for p := tc.afterLimit; p < tc.afterLimit+64; p++ {
					if res[p] != 0 {
						t.Fatalf("page %d resident: exec readahead went past the %d-page mapping", p, tc.n)
					}
				}
			}
		})
	}
}

func kernelVersion(rel string) (int, int) {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	maj, _ := strconv.Atoi(parts[0])
	min, _ := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return maj, min
}

// readaheadPages returns read_ahead_kb of path's device in 4 KiB pages.
func readaheadPages(t *testing.T, path string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	kb, err := blockdev.Uint("/sys", unix.Major(st.Dev), unix.Minor(st.Dev), "bdi/read_ahead_kb")
	if err != nil {
		t.Skipf("no read_ahead_kb for %s: %v", path, err)
	}
	return kb / 4
}

// residentAfter returns mincore's view of path's pages.
func residentAfter(t *testing.T, path string, pages int) []byte {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, pages*4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, pages)
	if err := mincore(mem, vec); err != nil {
		t.Fatal(err)
	}
	return vec
}
