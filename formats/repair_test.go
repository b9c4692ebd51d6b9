package formats

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	crashEnv     = "PREDICTIO_FORMATS_CRASH_DIR"
	crashModeEnv = "PREDICTIO_FORMATS_CRASH_MODE"
)

// crashFileEvery is how many access rows use one file before the crash
// writer moves on to a new one.
const crashFileEvery = 900

// crashRow is the deterministic access row i of the crash tests. Every
// crashFileEvery rows it moves to a new file, whose row the writer learns
// late (see crashWriter).
func crashRow(i int) Access {
	return Access{TS: 1e9 + uint64(i)*1000, PID: 10, TID: 10 + uint32(i%3), Comm: "w" + strconv.Itoa(i/5000),
		FileID: crashFile(i), FirstPage: uint64(i), NPages: 1, Kind: KindRead,
		EndNS: 1e9 + uint64(i)*1000 + 400, Op: uint64(i + 1), Ret: 4096}
}

func crashFile(i int) uint32 { return uint32(i/crashFileEvery + 1) }

// crashFileRow is the row the crash writer gives file id.
func crashFileRow(id uint32) File {
	return File{ID: id, Dev: 8 << 20, Ino: 1000 + uint64(id), Path: fmt.Sprintf("/crash/%03d", id), Size: 1 << 40, Mode: ModeRegular | 0o644}
}

// TestMain lets the crash tests re-execute this binary as a writer that is
// then killed with SIGKILL.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashWriter(dir, os.Getenv(crashModeEnv))
		return
	}
	os.Exit(m.Run())
}

// crashWriter writes rows like a recorder that resolves paths late: it
// adds the row of every other file with AddFile some rows after the file's
// first access, and leaves the rest to its file resolver. It prints what it
// did and, at the point its mode names, stops and waits to be killed:
//
//	first-batch  after the first accesses batch reached the file
//	mid          never: it appends and flushes until killed
//	finalize:S   in Close, at stage S ("tables", "files finished", ...)
func crashWriter(dir, mode string) {
	stop := func(what string) {
		fmt.Println("stopped", what)
		os.Stdout.Sync()
		select {} // wait for SIGKILL
	}
	if mode == "first-batch" {
		testHookBatch = func(table string, n int) {
			if table == AccessesFile && n == 1 {
				stop("after accesses batch 1")
			}
		}
	}
	if stage, ok := strings.CutPrefix(mode, "finalize:"); ok {
		testHookClose = func(s string) {
			if s == stage {
				stop("in Close at " + s)
			}
		}
	}
	w, err := Create(dir, WithBatchRows(4096), WithFileResolver(crashFileRow))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	w.Manifest().Recording.Source = "crash-test"
	w.Manifest().Start.MonotonicNS = 1e9
	w.Manifest().Timing.ServiceTimes = true
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if err := w.Flush(); err != nil { // the provisional manifest gets the above
		fail(err)
	}
	for i := 0; ; i++ {
		a := crashRow(i)
		if err := w.Append(&a); err != nil {
			fail(err)
		}
		// Even files are added by the caller, late.
		if id := crashFile(i); i%crashFileEvery == 300 && id%2 == 0 && !w.HasFile(id) {
			if err := w.AddFile(crashFileRow(id)); err != nil {
				fail(err)
			}
		}
		if i%100 == 0 {
			h := Hint{TS: a.TS, PID: 10, TID: a.TID, Kind: HintCustom, FileID: a.FileID, Name: "h", Source: HintSourceApp}
			if err := w.AppendHint(&h); err != nil {
				fail(err)
			}
		}
		if mode == "mid" && (i+1)%7000 == 0 {
			if err := w.Flush(); err != nil {
				fail(err)
			}
			fmt.Println("flushed", i+1)
		}
		if strings.HasPrefix(mode, "finalize:") && i == 20000 {
			if err := w.Close(); err != nil {
				fail(err)
			}
			fmt.Println("closed")
			return
		}
	}
}

// killWriter runs crashWriter in a child process in mode, reads its output
// until until(line) is true, then kills it with SIGKILL. It returns the
// last "flushed" count.
func killWriter(t *testing.T, dir, mode string, until func(line string, flushed int) bool) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir, crashModeEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	sc := bufio.NewScanner(out)
	flushed := 0
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error") || line == "closed" {
			cmd.Process.Kill()
			t.Fatalf("crash writer (%s): %s", mode, line)
		}
		if n, ok := strings.CutPrefix(line, "flushed "); ok {
			flushed, _ = strconv.Atoi(n)
		}
		if until(line, flushed) {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st, _ := cmd.Process.Wait(); st != nil && st.Success() {
		t.Fatalf("crash writer (%s) exited before it was killed", mode)
	}
	return flushed
}

// checkRecovered repairs the killed bundle in dir and checks that every
// recovered access and hint resolves to a file row with a path, that the
// rows are the ones written, and that the bundle verifies. It returns the
// number of accesses recovered.
func checkRecovered(t *testing.T, dir string) uint64 {
	t.Helper()
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "repair") || !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Open of a killed bundle: %v, want ErrIncomplete with advice to repair", err)
	}
	rep, err := Repair(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("repair: %v", rep.Notes)
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest()
	if m.Complete || len(m.Notes) == 0 || m.Recording.Source != "crash-test" {
		t.Fatalf("manifest after repair: complete=%v notes=%v source=%q", m.Complete, m.Notes, m.Recording.Source)
	}
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	paths := map[uint32]string{}
	for _, f := range files {
		if f != crashFileRow(f.ID) {
			t.Fatalf("file row %+v, want %+v", f, crashFileRow(f.ID))
		}
		paths[f.ID] = f.Path
	}
	rows := readRows(t, dir)
	for i, a := range rows.accesses {
		if want := crashRow(i); a != want {
			t.Fatalf("access %d: got %+v, want %+v", i, a, want)
		}
		if paths[a.FileID] == "" {
			t.Fatalf("access %d references file_id %d, which has no row with a path (%d file rows recovered)", i, a.FileID, len(files))
		}
	}
	for i, h := range rows.hints {
		if paths[h.FileID] == "" {
			t.Fatalf("hint %d references file_id %d, which has no row with a path (%d file rows recovered)", i, h.FileID, len(files))
		}
	}
	if uint64(len(rows.accesses)) != rep.Tables[AccessesFile] || uint64(len(rows.hints)) != rep.Tables[HintsFile] {
		t.Fatalf("read %d accesses, %d hints; the report says %d, %d", len(rows.accesses), len(rows.hints), rep.Tables[AccessesFile], rep.Tables[HintsFile])
	}
	if err := b.CheckReferences(); err != nil {
		t.Fatal(err)
	}
	if errs := Verify(dir); len(errs) != 0 {
		t.Fatalf("verify after repair: %v", errs)
	}
	if last := crashRow(len(rows.accesses) - 1); len(rows.accesses) > 0 && (m.Timing.FirstStartNS != crashRow(0).TS || m.Timing.LastEndNS != last.EndNS) {
		t.Fatalf("timing after repair %+v, want first start %d, last end %d", m.Timing, crashRow(0).TS, last.EndNS)
	}
	rep2, err := Repair(dir)
	if err != nil || !rep2.AlreadyComplete {
		t.Fatalf("second repair: %+v, %v", rep2, err)
	}
	return uint64(len(rows.accesses))
}

// TestRepairAfterSIGKILL kills a writer that learns file rows late at
// several points and checks what repair recovers: every recovered access
// and hint resolves to a file with a path (issue 17).
func TestRepairAfterSIGKILL(t *testing.T) {
	t.Run("first-batch", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "crash")
		killWriter(t, dir, "first-batch", func(line string, _ int) bool { return strings.HasPrefix(line, "stopped") })
		if n := checkRecovered(t, dir); n != 4096 {
			t.Fatalf("recovered %d accesses, want the first batch of 4096", n)
		}
	})
	t.Run("mid", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "crash")
		flushed := killWriter(t, dir, "mid", func(_ string, flushed int) bool { return flushed >= 35000 })
		time.Sleep(time.Millisecond) // let it write part of the next batch
		if n := checkRecovered(t, dir); n < uint64(flushed) {
			t.Fatalf("recovered %d accesses, flushed %d", n, flushed)
		}
	})
	for _, stage := range []string{"tables", "files finished", "accesses finished", "hints finished"} {
		t.Run("finalize/"+stage, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "crash")
			killWriter(t, dir, "finalize:"+stage, func(line string, _ int) bool { return strings.HasPrefix(line, "stopped") })
			if n := checkRecovered(t, dir); n != 20001 {
				t.Fatalf("recovered %d accesses, wrote 20001 before Close", n)
			}
		})
	}
}

func TestRepairAbortAndTruncation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, WithBatchRows(1000))
	if err != nil {
		t.Fatal(err)
	}
	for id := uint32(1); id <= 4; id++ {
		w.AddFile(crashFileRow(id))
	}
	for i := 0; i < 3500; i++ {
		a := crashRow(i)
		w.Append(&a)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 3500; i < 3600; i++ {
		a := crashRow(i)
		w.Append(&a)
	}
	w.Abort() // the last 100 rows were never flushed
	// Simulate a torn write: garbage after the flushed data.
	f, _ := os.OpenFile(filepath.Join(dir, AccessesFile), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0xff, 0xff, 0xff, 0xff, 0x40, 0, 0, 0, 1, 2, 3})
	f.Close()
	rep, err := Repair(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tables[AccessesFile] != 3500 || rep.DroppedBytes[AccessesFile] != 11 {
		t.Fatalf("report %+v", rep)
	}
	if errs := Verify(dir); len(errs) != 0 {
		t.Fatalf("verify: %v", errs)
	}
}

// TestRepairFormat10 repairs a format 1.0 table whose footer was lost: it
// keeps its 1.0 schema (no CRCs) and reads as before.
func TestRepairFormat10(t *testing.T) {
	dir := copyBundle(t, filepath.Join("..", "testdata", "seq"))
	want := readRows(t, dir)
	path := filepath.Join(dir, AccessesFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := newTableFileBytes(data, AccessesFile, tableOpts{})
	if err != nil {
		t.Fatal(err)
	}
	// Cut after the last batch: no final dictionary, marker or footer.
	if err := os.WriteFile(path, data[:tf.batches[len(tf.batches)-1].end()], 0o644); err != nil {
		t.Fatal(err)
	}
	os.Rename(filepath.Join(dir, ManifestFile), filepath.Join(dir, PartialManifestFile))
	if _, err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	b := mustOpen(t, dir)
	if b.Manifest().FormatVersion != "1.0.0" || b.Integrity() != IntegrityLegacy {
		t.Fatalf("repaired 1.0 bundle: format %s, integrity %s", b.Manifest().FormatVersion, b.Integrity())
	}
	if cols, _ := b.Columns(AccessesFile); len(cols) != 8 {
		t.Fatalf("repaired 1.0 accesses.arrow has columns %v", cols)
	}
	equalRows(t, readRows(t, dir), want)
	if errs := Verify(dir); len(errs) != 0 {
		t.Fatal(errs)
	}
}
