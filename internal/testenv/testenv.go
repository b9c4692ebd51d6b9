// Package testenv holds helpers shared by the tests of several packages.
package testenv

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// ScratchDir returns a fresh directory, removed when the test ends, on a
// filesystem that honours O_DIRECT and has a real page cache: /var/tmp, else
// os.TempDir(). tmpfs (often /tmp) qualifies for neither. Where no such
// directory exists the test is skipped with skipMsg, which should name the
// missing capability. prefix starts the directory's name.
func ScratchDir(t testing.TB, prefix, skipMsg string) string {
	t.Helper()
	for _, base := range []string{"/var/tmp", os.TempDir()} {
		var st unix.Statfs_t
		if unix.Statfs(base, &st) != nil || st.Type == unix.TMPFS_MAGIC {
			continue
		}
		dir, err := os.MkdirTemp(base, prefix)
		if err != nil {
			t.Fatalf("make scratch directory in %s: %v", base, err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	t.Skip(skipMsg)
	return ""
}

// Pattern is the byte at offset off of a file written by WritePattern: it
// varies within and across 4 KiB blocks, so misplaced blocks show.
func Pattern(off int64) byte { return byte(off*7 + off>>12 + 3) }

// WritePattern writes a size-byte file of Pattern bytes to path.
func WritePattern(t testing.TB, path string, size int) {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = Pattern(int64(i))
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Tool returns the path of program name, which scripts/setup.sh installs
// (CI runs it first); a missing one fails the test rather than skipping
// it, so that a missing install step shows.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not installed: run scripts/setup.sh, which installs it", name)
	}
	return p
}
