package replay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
)

// TestKindFidelity: each run compares, per kind of operation, the recorded
// service and think times (summed exactly from the bundle) with the
// replayed ones; a replay never waits less than the recorded think time,
// and the text report prints the baseline's comparison.
func TestKindFidelity(t *testing.T) {
	files := []formats.File{
		{ID: 1, Dev: 1, Ino: 1, Path: "/d/a.bin", Size: 64 * 4096, MtimeNS: mtime, Mode: formats.ModeRegular | 0o644},
	}
	us := uint64(time.Microsecond)
	var rows []formats.Access
	var readService, readThink, statService, statThink uint64
	ts := uint64(time.Second)
	var prevEnd uint64
	for i := 0; i < 30; i++ {
		think, service := uint64(20+i)*us, uint64(5+i%3)*us
		if i > 0 {
			ts = prevEnd + think
		}
		a := formats.Access{TS: ts, EndNS: ts + service, TID: 1, PID: 1, FileID: 1, Op: uint64(i + 1)}
		if i%3 == 2 {
			a.Kind, a.Ret = formats.KindStat, 0
			statService += service
			if i > 0 {
				statThink += think
			}
		} else {
			a.Kind, a.FirstPage, a.NPages, a.Ret = formats.KindRead, uint64(i), 1, 4096
			readService += service
			if i > 0 {
				readThink += think
			}
		}
		rows = append(rows, a)
		prevEnd = a.EndNS
	}
	bundle, root := bundle11(t, files, rows, true)
	rep := replayBundle(t, bundle, Options{Root: root, Backend: BackendNone, Repeat: 3})
	for _, run := range append(slices.Clone(rep.Runs), &Run{Fidelity: rep.Summary.Fidelity}) {
		fs := run.Fidelity
		if len(fs) != 2 || fs[0].Kind != "read" || fs[1].Kind != "stat" {
			t.Fatalf("fidelity %+v; want a read and a stat row", fs)
		}
		rd, st := fs[0], fs[1]
		if rd.Ops != 20 || st.Ops != 10 {
			t.Fatalf("ops %d reads, %d stats; want 20 and 10", rd.Ops, st.Ops)
		}
		if rd.RecordedServiceNS != int64(readService) || rd.RecordedThinkNS != int64(readThink) ||
			st.RecordedServiceNS != int64(statService) || st.RecordedThinkNS != int64(statThink) {
			t.Fatalf("recorded: reads %+v (want service %d, think %d), stats %+v (want %d, %d)", rd, readService, readThink, st, statService, statThink)
		}
		for _, f := range fs {
			if f.ServiceNS <= 0 || f.WaitNS < f.RecordedThinkNS {
				t.Errorf("%s: replayed service %d ns, waited %d ns for a recorded think time of %d ns: a wait ended early", f.Kind, f.ServiceNS, f.WaitNS, f.RecordedThinkNS)
			}
		}
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	statRow := false
	for _, line := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "stat" && f[1] == "10" {
			statRow = true
		}
	}
	if !strings.Contains(b.String(), "Recorded against replayed, per kind") || !statRow {
		t.Errorf("text report lacks the per-kind comparison:\n%s", b.String())
	}
}

// TestWaitsEndOnTime: a replayed think time ends when it is due, not late
// by the kernel's wake-up latency (5–20 µs from clock_nanosleep on this
// kind of VM), which would be added to each of a program's thousands of
// operations; and never before it is due.
func TestWaitsEndOnTime(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		clockThread()
		for _, d := range []time.Duration{3 * time.Microsecond, 10 * time.Microsecond, 40 * time.Microsecond, 300 * time.Microsecond} {
			const n = 201
			late := make([]time.Duration, 0, n)
			for i := 0; i < n; i++ {
				due := time.Now().Add(d)
				sleepUntil(due)
				late = append(late, time.Since(due))
			}
			slices.Sort(late)
			t.Logf("waits of %v: late by %v (median), %v (90th percentile)", d, late[n/2], late[n*9/10])
			if late[0] < 0 {
				t.Errorf("a wait of %v ended %v early", d, -late[0])
			}
			// The median is what every operation pays; a loaded
			// machine's preemptions only reach the tail.
			if late[n/2] > 2*time.Microsecond {
				t.Errorf("waits of %v end %v late (median); want under 2 µs", d, late[n/2])
			}
		}
	}()
	<-done
}

// TestEffectModes: the effect observer (eBPF on every system call's entry
// and exit of the machine, about 1.5 µs on a cached pread here) never runs
// during a baseline, which prefetches nothing and must cost what the
// recorded program did: baselines report nothing prefetched and no note.
// By default (separate) the timed oracle runs go without it too and one
// more oracle run, marked counts_only, counts by effect for the summary;
// inline counts in the timed oracle runs, which then carry no note; off
// counts nothing and says so. Every mode prefetches.
func TestEffectModes(t *testing.T) {
	tr := memTrace(256, sparseRuns(256, 64, 1), 10_000)
	root := materialized(t, tr)
	for _, c := range []struct {
		mode     string
		attached []bool
	}{
		{EffectSeparate, []bool{false, false, false, false, true}},
		{EffectInline, []bool{false, true, false, true}},
		{EffectOff, []bool{false, false, false, false}},
	} {
		opt := Options{Root: root, Backend: BackendKernel, Runs: []string{Baseline, "oracle"}, Repeat: 2, Effect: c.mode}
		if err := opt.validate(); err != nil {
			t.Fatal(err)
		}
		r, err := newReplayer(tr, opt)
		if err != nil {
			t.Fatal(err)
		}
		var attached []bool
		r.opt.duringRun = func(spec string) { attached = append(attached, r.obs != nil) }
		rep, err := r.Replay(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if r.obsErr != "" && c.mode != EffectOff {
			if unix.Geteuid() != 0 {
				t.Skipf("no effect observer (%s): needs CAP_BPF and CAP_PERFMON", r.obsErr)
			}
			t.Fatalf("%s: no effect observer as root: %s", c.mode, r.obsErr)
		}
		if !slices.Equal(attached, c.attached) {
			t.Errorf("%s: observer attached during the runs: %v, want %v", c.mode, attached, c.attached)
		}
		orc := rep.Summary.Policies[1]
		if orc.Rounds != 2 || orc.Submitted.Median == 0 {
			t.Errorf("%s: oracle summary over %d rounds, %v pages submitted; want 2 timed rounds that prefetch", c.mode, orc.Rounds, orc.Submitted)
		}
		if orc.BackendBusyNS.Min == 0 || rep.Summary.Policies[0].BackendBusyNS.Max != 0 {
			t.Errorf("%s: backend busy %v (oracle), %v (baseline); want time in every oracle round, none for the baseline", c.mode, orc.BackendBusyNS, rep.Summary.Policies[0].BackendBusyNS)
		}
		// Counted by effect: its prefetched pages were demanded, in time or
		// late (on a loaded machine the one counting run of separate may
		// find every prefetch late).
		counted := orc.UsedInTime.Median+orc.Late.Median > 0
		if counted == (c.mode == EffectOff) {
			t.Errorf("%s: oracle summary: %v pages used in time, %v late", c.mode, orc.UsedInTime, orc.Late)
		}
		for _, run := range rep.Runs {
			if run.Policy == Baseline && (run.Prefetched != 0 || run.EffectNote != "") {
				t.Errorf("%s: baseline round %d: %v, note %q; want nothing prefetched and no note", c.mode, run.Round, run.Counts, run.EffectNote)
			}
			if run.Policy != Baseline && c.mode == EffectInline && run.EffectNote != "" {
				t.Errorf("inline: oracle round %d: no counts by effect: %s", run.Round, run.EffectNote)
			}
		}
		last := rep.Runs[len(rep.Runs)-1]
		if (c.mode == EffectSeparate) != last.CountsOnly {
			t.Errorf("%s: last run %s counts_only %v", c.mode, last.Policy, last.CountsOnly)
		}
		if c.mode == EffectOff && !strings.Contains(last.EffectNote, "--effect off") {
			t.Errorf("off: note %q", last.EffectNote)
		}
	}
}

// metaWorker returns a worker of a run of bundle (under root) with its
// files, for calling its metadata operations one at a time.
func metaWorker(t testing.TB, bundle, root string) (*worker, []*openFile, *Replayer) {
	t.Helper()
	r, err := New(bundle, Options{Root: root, Backend: BackendNone})
	if err != nil {
		t.Fatal(err)
	}
	files, err := openFiles(r.t, r.paths, false, true)
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{r: &runState{rp: r, files: files}}
	t.Cleanup(func() {
		w.closeFDs(files)
		closeFiles(files)
	})
	return w, files, r
}

// step replays the thread's next operation as the worker loop does: the
// operation, then what it left for after its time was taken.
func step(w *worker, o *op, files []*openFile) {
	w.metadata(o, files)
	w.settle(files)
}

// TestMetadataLikeTheProgram: a thread's metadata operations repeat the
// program's system calls: a directory read is one getdents64 on the
// directory the replayed open opened, continuing to its end (each row
// reaches the end where the program's did); a lookup in a directory the
// thread has open is made relative to it (it still succeeds when the
// directory's path is gone); a stat of the file just opened is an fstat
// of it (glibc's fstat is newfstatat(fd, "")).
func TestMetadataLikeTheProgram(t *testing.T) {
	dirMode, reg := formats.ModeDir|0o755, formats.ModeRegular|0o644
	files := []formats.File{
		{ID: 1, Dev: 1, Ino: 10, Path: "/d", Mode: dirMode, MtimeNS: mtime},
		{ID: 2, Dev: 1, Ino: 11, Path: "/d/f", Size: 4096, Mode: reg, MtimeNS: mtime},
		{ID: 3, Dev: 1, Ino: 12, Path: "/e", Mode: dirMode, MtimeNS: mtime},
	}
	var rows []formats.Access
	row := func(kind formats.AccessKind, file uint32, ret int64) {
		ts := uint64(len(rows)+1) * uint64(time.Millisecond)
		rows = append(rows, formats.Access{TS: ts, EndNS: ts + 1000, TID: 1, PID: 1, FileID: file, Kind: kind, Ret: ret, Op: uint64(len(rows) + 1)})
	}
	// e: 2000 entries of 48 bytes (getdents64's record of a 27-byte
	// name), 682 in each 32 KiB call: three calls with entries, then the
	// end.
	row(formats.KindOpen, 3, 3)
	for range 3 {
		row(formats.KindReaddir, 3, 32000)
	}
	row(formats.KindReaddir, 3, 0)
	row(formats.KindOpen, 1, 4) // d
	row(formats.KindOpen, 2, 5) // d/f, relative to d
	row(formats.KindStat, 2, 0) // its fstat
	row(formats.KindRead, 2, 4096)
	rows[len(rows)-1].NPages = 1
	bundle, root := bundle11(t, files, rows, true)
	e := filepath.Join(root, "e")
	for i := range 2000 {
		if err := os.WriteFile(filepath.Join(e, fmt.Sprintf("entry-with-a-long-name-%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, fs, r := metaWorker(t, bundle, root)
	ops := r.t.threads[0].ops
	reads := 0
	for i := range ops[:5] {
		before := w.meta.Mismatched
		step(w, &ops[i], fs)
		if w.meta.Mismatched != before {
			t.Fatalf("operation %d (%s, recorded ret %d) mismatched", i, ops[i].kind, ops[i].ret)
		}
		if ops[i].kind == formats.KindReaddir {
			reads++
		}
	}
	// The directory's end comes where the program's calls found it: a
	// directory read from its start again would find entries.
	if _, ok := w.fds[r.t.byID[3].idx]; !ok || reads != 4 {
		t.Fatalf("directory e not kept open for its reads (%d reads)", reads)
	}
	step(w, &ops[5], fs) // open d
	if err := os.Rename(filepath.Join(root, "d"), filepath.Join(root, "moved")); err != nil {
		t.Fatal(err)
	}
	step(w, &ops[6], fs) // open d/f: through d's descriptor
	if w.meta.Mismatched != 0 {
		t.Errorf("the lookup of d/f once d's path was gone failed: it went through the path")
	}
	if err := os.Rename(filepath.Join(root, "moved", "f"), filepath.Join(root, "moved", "g")); err != nil {
		t.Fatal(err)
	}
	w.metadata(&ops[7], fs) // the fstat of d/f
	if w.meta.Mismatched != 0 {
		t.Errorf("the stat of d/f just opened, once its name was gone, failed: it went through the path")
	}
}

// openAndRead returns n files of pages pages each and a recording that
// opens and reads each whole, one after another.
func openAndRead(n int, pages uint32) ([]formats.File, []formats.Access) {
	var files []formats.File
	var rows []formats.Access
	size := uint64(pages) * 4096
	for i := range n {
		id := uint32(i + 1)
		files = append(files, formats.File{ID: id, Dev: 1, Ino: uint64(id), Path: fmt.Sprintf("/d/f%03d", i), Size: size, Mode: formats.ModeRegular | 0o644, MtimeNS: mtime})
		ts := uint64(i+1) * 10000
		rows = append(rows, formats.Access{TS: ts, EndNS: ts + 1000, TID: 1, PID: 1, FileID: id, Kind: formats.KindOpen, Ret: 3, Op: uint64(2*i + 1)},
			formats.Access{TS: ts + 2000, EndNS: ts + 3000, TID: 1, PID: 1, FileID: id, NPages: pages, Kind: formats.KindRead, Ret: int64(size), Op: uint64(2*i + 2)})
	}
	return files, rows
}

// TestFDTableGrown: before the clock starts the replay's descriptor table
// already holds a descriptor for each file (FDSize in /proc/self/status),
// so no replayed open waits for the kernel to grow it, which in a
// multi-threaded process waits for an RCU grace period (10-20 ms here).
func TestFDTableGrown(t *testing.T) {
	const n = 600
	files, rows := openAndRead(n, 1)
	bundle, root := bundle11(t, files, rows, true)
	r, err := New(bundle, Options{Root: root, Backend: BackendNone, Timing: TimingASAP})
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	r.opt.duringRun = func(string) { size = fdTableSize(t) }
	if _, err := r.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	if size < n {
		t.Errorf("descriptor table of %d when the run started; want room for the %d files it opens", size, n)
	}
}

// fdTableSize returns FDSize of /proc/self/status.
func fdTableSize(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "FDSize:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no FDSize in /proc/self/status")
	return 0
}

// TestReadsMapNothing: a file the run only reads is never mapped; the
// whole-file mapping is made by the first touch that needs it.
func TestReadsMapNothing(t *testing.T) {
	files := []formats.File{{ID: 1, Dev: 1, Ino: 1, Path: "/d/a", Size: 8 * 4096, Mode: formats.ModeRegular | 0o644, MtimeNS: mtime}}
	rows := []formats.Access{
		{TS: 1000, EndNS: 2000, TID: 1, PID: 1, FileID: 1, NPages: 2, Kind: formats.KindRead, Ret: 8192, Op: 1},
		{TS: 3000, EndNS: 4000, TID: 1, PID: 1, FileID: 1, FirstPage: 4, NPages: 1, Kind: formats.KindFault, Op: 2},
	}
	bundle, root := bundle11(t, files, rows, true)
	w, fs, r := metaWorker(t, bundle, root)
	f := fs[r.t.byID[1].idx]
	d := &pageCacheDemand{files: fs, ps: r.t.pageSize}
	ops := r.t.threads[0].ops
	if err := d.demand(w, &ops[0]); err != nil {
		t.Fatal(err)
	}
	if f.mem != nil {
		t.Fatalf("a read mapped the file")
	}
	if err := d.demand(w, &ops[1]); err != nil {
		t.Fatal(err)
	}
	if f.mem == nil {
		t.Fatalf("a fault without a recorded mapping did not map the file")
	}
}

// TestFilesRetired: a run closes a file after its last operation (the
// program closed it too), its own descriptor and the backend's, so a
// bundle of more files than the descriptor limit replays: 600 files
// opened and read in turn, under a limit of 256, with the kernel
// backend's prefetches (oracle) naming them all.
func TestFilesRetired(t *testing.T) {
	const n = 600
	files, rows := openAndRead(n, 4)
	bundle, root := bundle11(t, files, rows, true)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = 256
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	rep := replayBundle(t, bundle, Options{Root: root, Backend: BackendKernel, Timing: TimingASAP, Runs: []string{Baseline, "oracle"}})
	for _, run := range rep.Runs {
		if run.Accesses != n || len(run.Warnings) > 0 {
			t.Errorf("%s: %d accesses, warnings %q", run.Policy, run.Accesses, run.Warnings)
		}
	}
}

// BenchmarkOpenSettle measures what replaying one file's open costs the
// replaying thread: the timed open(2), then, in the program's think time,
// installing the descriptor (settle) and closing it after the file's last
// operation (retire). Compare the two figures with the recorded open and
// think times of a tree walk (docs/replay.md, "Recorded against replayed").
//
//	go test -run '^$' -bench OpenSettle ./replay
func BenchmarkOpenSettle(b *testing.B) {
	files := []formats.File{{ID: 1, Dev: 1, Ino: 1, Path: "/d/a", Size: 4096, Mode: formats.ModeRegular | 0o644, MtimeNS: mtime}}
	rows := []formats.Access{
		{TS: 1000, EndNS: 2000, TID: 1, PID: 1, FileID: 1, Kind: formats.KindOpen, Ret: 3, Op: 1},
		{TS: 3000, EndNS: 4000, TID: 1, PID: 1, FileID: 1, NPages: 1, Kind: formats.KindRead, Ret: 4096, Op: 2},
	}
	bundle, root := bundle11(b, files, rows, true)
	w, fs, r := metaWorker(b, bundle, root)
	o, f := &r.t.threads[0].ops[0], fs[r.t.byID[1].idx]
	var timed, after time.Duration
	for b.Loop() {
		t0 := time.Now()
		w.metadata(o, fs)
		t1 := time.Now()
		w.settle(fs)
		f.retire()
		after += time.Since(t1)
		timed += t1.Sub(t0)
	}
	b.ReportMetric(float64(timed.Nanoseconds())/float64(b.N), "open-ns/op")
	b.ReportMetric(float64(after.Nanoseconds())/float64(b.N), "settle-ns/op")
}
