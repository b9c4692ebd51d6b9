package formats

import (
	"bufio"
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

const crashEnv = "PREDICTIO_FORMATS_CRASH_DIR"

// crashRow is the deterministic access row i of the crash test.
func crashRow(i int) Access {
	return Access{TS: 1e9 + uint64(i)*1000, PID: 10, TID: 10 + uint32(i%3), Comm: "w" + strconv.Itoa(i/5000), FileID: 1, FirstPage: uint64(i), NPages: 1, Kind: KindRead}
}

// TestMain lets the crash test re-execute this binary as a writer that is
// then killed with SIGKILL.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashWriter(dir)
		return
	}
	os.Exit(m.Run())
}

// crashWriter appends rows forever, flushing every 7000 rows and printing
// the number of rows flushed, until it is killed.
func crashWriter(dir string) {
	w, err := Create(dir, WithBatchRows(4096))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	w.Manifest().Recording.Source = "crash-test"
	w.Manifest().Start.MonotonicNS = 1e9
	if err := w.AddFile(File{ID: 1, Path: "/crash", Size: 1 << 40}); err != nil {
		os.Exit(1)
	}
	for i := 0; ; i++ {
		a := crashRow(i)
		if err := w.Append(&a); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if i%100 == 0 {
			h := Hint{TS: a.TS, PID: 10, Kind: HintCustom, FileID: 1, Name: "h"}
			w.AppendHint(&h)
		}
		if (i+1)%7000 == 0 {
			if err := w.Flush(); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			fmt.Println("flushed", i+1)
		}
	}
}

func TestRepairAfterSIGKILL(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "crash")
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	flushed := 0
	deadline := time.Now().Add(30 * time.Second)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error") {
			t.Fatal(line)
		}
		if n, ok := strings.CutPrefix(line, "flushed "); ok {
			flushed, _ = strconv.Atoi(n)
		}
		// Kill mid-way between flushes, after some dictionary growth.
		if flushed >= 70000 || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(time.Millisecond) // let it write part of the next batch
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if flushed == 0 {
		t.Fatal("writer flushed nothing before the deadline")
	}

	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "repair") {
		t.Fatalf("Open of a killed bundle: %v, want advice to repair", err)
	}
	rep, err := Repair(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flushed %d rows; repair: %v", flushed, rep.Notes)
	if got := rep.Tables[AccessesFile]; got < uint64(flushed) {
		t.Fatalf("recovered %d accesses, flushed %d", got, flushed)
	}
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest()
	if m.Complete || len(m.Notes) == 0 || m.Recording.Source != "crash-test" {
		t.Fatalf("manifest after repair: complete=%v notes=%v source=%q", m.Complete, m.Notes, m.Recording.Source)
	}
	c, err := b.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for c.Next() {
		if want := crashRow(i); *c.At() != want {
			t.Fatalf("row %d: got %+v, want %+v", i, *c.At(), want)
		}
		i++
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if uint64(i) != rep.Tables[AccessesFile] {
		t.Fatalf("read %d rows, report says %d", i, rep.Tables[AccessesFile])
	}
	if errs := Verify(dir); len(errs) != 0 {
		t.Fatalf("verify after repair: %v", errs)
	}
	// Repairing again changes nothing.
	rep2, err := Repair(dir)
	if err != nil || !rep2.AlreadyComplete {
		t.Fatalf("second repair: %+v, %v", rep2, err)
	}
}

func TestRepairAbortAndTruncation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, WithBatchRows(1000))
	if err != nil {
		t.Fatal(err)
	}
	w.AddFile(File{ID: 1, Size: 1 << 30})
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
