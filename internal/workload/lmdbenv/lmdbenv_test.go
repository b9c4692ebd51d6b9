package lmdbenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/predictio/predictio/internal/testenv"
)

// TestBuildAndScan builds an environment with mdb_load, checks it with
// mdb_stat and mdb_dump, and range-scans it with lmdb-scan, with and
// without MDB_NORDAHEAD.
func TestBuildAndScan(t *testing.T) {
	testenv.Tool(t, "mdb_load")
	dir := t.TempDir()
	env := filepath.Join(dir, "env")
	if err := Build(context.Background(), Config{Dir: env, Entries: 2000, ValueSize: 1024, Seed: 4, MapSize: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mdb_stat", env).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Entries: 2000") {
		t.Fatalf("mdb_stat: %v: %s", err, out)
	}
	dump, err := exec.Command("mdb_dump", "-p", env).CombinedOutput()
	if err != nil {
		t.Fatalf("mdb_dump: %v", err)
	}
	// mdb_dump prints keys in key order: the first two are entries 0 and 1.
	if !strings.Contains(string(dump), "HEADER=END\n user0000000000\n") {
		t.Errorf("dump does not start with user0000000000: %.200s", dump)
	}
	if err := Build(context.Background(), Config{Dir: env, Entries: 1}); err == nil || !strings.Contains(err.Error(), "already holds data.mdb") {
		t.Errorf("building over an environment: %v", err)
	}

	scanner, err := BuildScanner(context.Background(), dir, "")
	if err != nil {
		t.Fatalf("%v (scripts/setup.sh installs liblmdb-dev)", err)
	}
	for _, nordahead := range []bool{false, true} {
		args := ScanArgs(scanner, env, 500, 100, nordahead)
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
		var n, bytes, sum uint64
		if _, err := fmt.Sscan(string(out), &n, &bytes, &sum); err != nil || n != 100 || bytes != 100*1024 || sum == 0 {
			t.Errorf("%v printed %q", args, out)
		}
	}
	args := ScanArgs(scanner, env, 1990, 100, false)
	out, _ = exec.Command(args[0], args[1:]...).CombinedOutput()
	if !strings.HasPrefix(string(out), "10 ") {
		t.Errorf("a scan past the last key read %q, want 10 entries", out)
	}
}
