package record

import (
	"context"
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

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
	"github.com/predictio/predictio/source"
)

// helperRecord runs Run in this (test binary) process: it records
// PREDICTIO_RECORD_N preads of PREDICTIO_RECORD_FILE by a helper into
// PREDICTIO_RECORD_OUT, and SIGKILLs itself at the point named by
// PREDICTIO_RECORD_KILL ("first-batch", "finalize"; "" for none: the test
// kills it from outside).
func helperRecord() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	point := os.Getenv("PREDICTIO_RECORD_KILL")
	cfg := Config{
		Output: os.Getenv("PREDICTIO_RECORD_OUT"),
		Command: []string{"env", "PREDICTIO_RECORD_HELPER=pread", "PREDICTIO_RECORD_FILE=" + os.Getenv("PREDICTIO_RECORD_FILE"),
			"PREDICTIO_RECORD_N=" + os.Getenv("PREDICTIO_RECORD_N"), exe},
		Stdout: os.Stdout, Stderr: os.Stderr,
		killAt: func(p string) {
			if p == point {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		},
	}
	if _, err := Run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestKilledRecorder kills predictio's recorder with SIGKILL while it
// writes the first batch, in the middle of a recording (from outside, once
// more than a batch is on disk) and while it finalizes. trace repair then
// recovers a bundle in which every access names a file row that has a
// path: file rows reach disk no later than the first batch naming them.
func TestKilledRecorder(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := tracetest.DiskDir(t)
	data := tracetest.WarmFile(t, dir, 64<<20)
	for _, point := range []string{"first-batch", "mid", "finalize"} {
		t.Run(point, func(t *testing.T) {
			out := filepath.Join(dir, point)
			kill := point
			n := 300_000
			if point == "mid" {
				kill, n = "", 20_000_000 // killed long before it ends
			}
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER=recordkill", "PREDICTIO_RECORD_OUT="+out,
				"PREDICTIO_RECORD_KILL="+kill, "PREDICTIO_RECORD_FILE="+data, "PREDICTIO_RECORD_N="+strconv.Itoa(n))
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer killCommandCgroup(cmd.Process.Pid)
			if point == "mid" {
				killWhenBatchesWritten(t, cmd, filepath.Join(out, formats.AccessesFile))
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("recorder ended with %v, want killed by SIGKILL", err)
			}
			killCommandCgroup(cmd.Process.Pid)
			rep, err := formats.Repair(out)
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			t.Logf("repaired: %v %v", rep.Tables, rep.Notes)
			b, err := formats.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			files, err := b.Files()
			if err != nil {
				t.Fatal(err)
			}
			paths := make(map[uint32]string)
			for _, f := range files {
				paths[f.ID] = f.Path
			}
			ac, err := b.Accesses()
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			n, ofData := 0, 0
			for ac.Next() {
				a := ac.At()
				p, ok := paths[a.FileID]
				if !ok || p == "" {
					t.Fatalf("access %+v names file %d, which has no row with a path (%q, %v)", *a, a.FileID, p, ok)
				}
				if p == data {
					ofData++
				}
				n++
			}
			if err := ac.Err(); err != nil {
				t.Fatal(err)
			}
			if point != "first-batch" && ofData < formats.DefaultBatchRows/2 {
				t.Errorf("recovered %d accesses, %d of %s: want at least a batch", n, ofData, data)
			}
			t.Logf("%s: recovered %d accesses (%d of the data file) in %d files", point, n, ofData, len(files))
		})
	}
}

// killWhenBatchesWritten SIGKILLs cmd once path holds more than 1 MiB
// (a few batches of rows).
func killWhenBatchesWritten(t *testing.T, cmd *exec.Cmd, path string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st, err := os.Stat(path); err == nil && st.Size() > 1<<20 {
			cmd.Process.Signal(syscall.SIGKILL)
			return
		}
		if cmd.ProcessState != nil {
			break
		}
	}
	cmd.Process.Kill()
	t.Fatalf("%s never grew past 1 MiB", path)
}

// killCommandCgroup kills what is left of the command a killed recorder
// (pid) had started: the processes of its cgroup.
func killCommandCgroup(pid int) {
	mnt := source.CgroupV2Mount()
	if mnt == "" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(mnt, fmt.Sprintf("predictio-source-%d-*", pid)))
	for _, d := range dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				unix.Kill(p, unix.SIGKILL)
			}
		}
		for i := 0; i < 100 && os.Remove(d) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}
