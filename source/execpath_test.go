package source

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/predictio/predictio/internal/tracetest"
)

// TestExecPath: for a script's exec the event's file is the interpreter,
// and ExecPath names the script the process asked for; for the exec the
// script makes next (the same process), the program it names, even when
// asked after both happened.
func TestExecPath(t *testing.T) {
	requireSource(t, "sched:sched_process_exec")
	dir := tracetest.DiskDir(t)
	script := filepath.Join(dir, "hello")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec /bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, c := open(t, Config{Exec: ExecAll})
	cmd := exec.Command(script)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	src.Stop()
	var ts []uint64
	for _, a := range c.accesses {
		if a.Kind == KindExec && a.PID == pid {
			ts = append(ts, a.TS)
		}
	}
	if len(ts) != 2 {
		t.Fatalf("%d exec events of pid %d, want 2", len(ts), pid)
	}
	if got := src.ExecPath(pid, ts[0]); got != script {
		t.Errorf("ExecPath(%d, first exec) = %q, want %q", pid, got, script)
	}
	if got := src.ExecPath(pid, ts[1]); got != "/bin/true" {
		t.Errorf("ExecPath(%d, second exec) = %q, want /bin/true", pid, got)
	}
}
