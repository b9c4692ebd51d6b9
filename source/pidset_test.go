package source

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/predictio/predictio/bpf"
)

func init() {
	// The threadexit helper's main goroutine stays on the leader thread, so
	// the exit below comes from another thread.
	if os.Getenv("PREDICTIO_RECORD_HELPER") == "threadexit" {
		runtime.LockOSThread()
		os.Exit(helperThreadExit())
	}
}

// helperThreadExit appends its pid to PREDICTIO_RECORD_FILE, starts a few
// threads and calls exit_group from one that is not the leader, so the
// thread that ends the group is usually not the leader.
func helperThreadExit() int {
	f, err := os.OpenFile(os.Getenv("PREDICTIO_RECORD_FILE"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return 1
	}
	fmt.Fprintln(f, os.Getpid())
	f.Close()
	block := make(chan struct{})
	for range 7 {
		go func() { runtime.LockOSThread(); <-block }()
	}
	go func() {
		runtime.LockOSThread()
		time.Sleep(20 * time.Millisecond)
		os.Exit(0)
	}()
	<-block
	return 0
}

// TestPidSetGroupExit checks that a followed process leaves the pid set when
// its thread group dies, whichever thread dies last: a pid left behind makes
// an unrelated process that reuses it a target.
func TestPidSetGroupExit(t *testing.T) {
	requireSource(t, "sched:sched_process_fork", "sched:sched_process_exit")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := t.TempDir() + "/pids"
	if err := os.WriteFile(pidFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const runs = 5
	sh := exec.Command("sh", "-c", "read x; for i in 1 2 3 4 5; do PREDICTIO_RECORD_HELPER=threadexit PREDICTIO_RECORD_FILE="+pidFile+" "+exe+"; done; read y")
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
	src, _ := open(t, Config{PIDs: []int{sh.Process.Pid}})
	var stale []uint32
	var checkErr error
	func() {
		{
			defer func() { in.Close(); sh.Wait() }()
			in.Write([]byte("go\n"))
			var pids []uint32
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				b, _ := os.ReadFile(pidFile)
				pids = pids[:0]
				for _, l := range strings.Fields(string(b)) {
					p, _ := strconv.ParseUint(l, 10, 32)
					pids = append(pids, uint32(p))
				}
				done := len(pids) == runs
				if done {
					_, err := os.Stat("/proc/" + strconv.Itoa(int(pids[runs-1])))
					done = os.IsNotExist(err)
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					checkErr = fmt.Errorf("helpers did not finish: pids %v", pids)
					return
				}
			}
			m := src.coll.Maps[bpf.RecordMapPids]
			for _, p := range pids {
				var v uint8
				if m.Lookup(p, &v) == nil {
					stale = append(stale, p)
				}
			}
			in.Write([]byte("done\n"))
		}
	}()
	if checkErr != nil {
		t.Fatal(checkErr)
	}
	if len(stale) > 0 {
		t.Errorf("exited pids %v are still in the pid set", stale)
	}
}
