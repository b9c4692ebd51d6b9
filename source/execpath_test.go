package source

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/predictio/predictio/internal/tracetest"
)

// TestExecPath: for a script's exec the event's file is the interpreter,
// and ExecPath names the script the process asked for.
func TestExecPath(t *testing.T) {
	requireSource(t, "sched:sched_process_exec")
	dir := tracetest.DiskDir(t)
	script := filepath.Join(dir, "hello")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, c := open(t, Config{Exec: ExecAll})
	cmd := exec.Command(script)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	src.Stop()
	var ts uint64
	for _, a := range c.accesses {
		if a.Kind == KindExec && a.PID == pid {
			ts = a.TS
		}
	}
	if ts == 0 {
		t.Fatalf("no exec event of pid %d", pid)
	}
	if got := src.ExecPath(pid, ts); got != script {
		t.Errorf("ExecPath(%d) = %q, want %q", pid, got, script)
	}
}
