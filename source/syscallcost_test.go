package source

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSyscallCost: the cost of a system call with programs on the raw
// syscall tracepoints is measured (> 0: the tracing slow path is not
// free), kept in the directory, and read back unchanged; a damaged file is
// measured again.
func TestSyscallCost(t *testing.T) {
	requireSource(t)
	dir := t.TempDir()
	ns, err := SyscallCost(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("syscall cost %.1f ns", ns)
	if ns <= 0 || ns > 100_000 {
		t.Fatalf("SyscallCost = %v ns, want what the slow path adds (> 0)", ns)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "syscall-cost-*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	if again, err := SyscallCost(dir); err != nil || again != ns {
		t.Fatalf("second SyscallCost = %v, %v; want the kept %v", again, err, ns)
	}
	if err := os.WriteFile(files[0], []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Measured again and kept: the file holds a figure again. (The figure
	// itself may be 0: a median of differences that noise made negative,
	// as under qemu's emulation, is 0, MeasureSyscallCost says.)
	again, err := SyscallCost(dir)
	if err != nil || again < 0 {
		t.Fatalf("SyscallCost after damage = %v, %v; want a new measurement", again, err)
	}
	var c syscallCost
	if b, err := os.ReadFile(files[0]); err != nil || json.Unmarshal(b, &c) != nil || c.NS != again || c.Measured.IsZero() {
		t.Errorf("after damage the file holds %+v (%v), want the new measurement %v", c, err, again)
	}
}
