package simulate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/policies"
)

// TestReadaheadOnThisMachine: files take their device's read_ahead_kb and
// max_sectors_kb (from a sysfs laid out like the kernel's, for the device
// the test's files are on); files not on this machine take the fallback
// device's; the summary says both.
func TestReadaheadOnThisMachine(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "data")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sys := t.TempDir()
	disk := filepath.Join(sys, "devices", "virtual", "block", "vdz")
	for rel, v := range map[string]string{"uevent": "MAJOR=1\nDEVNAME=vdz\n", "queue/read_ahead_kb": "64\n", "queue/max_sectors_kb": "1280\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(disk, rel)), 0o755)
		if err := os.WriteFile(filepath.Join(disk, rel), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755)
	if err := os.Symlink(disk, filepath.Join(sys, "dev", "block", dev)); err != nil {
		t.Fatal(err)
	}
	// The bdi's read_ahead_kb wins over the queue's, as for the kernel's
	// ra_pages.
	os.MkdirAll(filepath.Join(sys, "class", "bdi", dev), 0o755)
	os.WriteFile(filepath.Join(sys, "class", "bdi", dev, "read_ahead_kb"), []byte("8192\n"), 0o644)

	m := readaheadOn(sys, map[uint32]string{1: file, 2: "/no/such/file"}, dir)
	want := policies.RAParams{ReadAheadKB: 8192, MaxSectorsKB: 1280}
	if got := m.FileRA(1); got.ReadAheadKB != want.ReadAheadKB || got.MaxSectorsKB != want.MaxSectorsKB {
		t.Errorf("file on the device: %+v, want %+v", got, want)
	}
	if got := m.FileRA(2); got.ReadAheadKB != 8192 || got.MaxSectorsKB != 1280 {
		t.Errorf("file not on this machine: %+v, want the fallback device's", got)
	}
	for _, w := range []string{"vdz read_ahead_kb 8192, max_sectors_kb 1280 (1 file)", "1 file not on this machine: vdz"} {
		if !strings.Contains(m.Summary, w) {
			t.Errorf("summary %q lacks %q", m.Summary, w)
		}
	}
	m = readaheadOn(sys, map[uint32]string{2: "/no/such/file"}, "")
	if got := m.FileRA(2); got != (policies.RAParams{}) || !strings.Contains(m.Summary, "spec's defaults") {
		t.Errorf("no fallback: %+v, %q; want unknown parameters", got, m.Summary)
	}
}
