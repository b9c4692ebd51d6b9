package source

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestScanMaps(t *testing.T) {
	exe, _ := os.Executable()
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	got := scanMaps("/proc/self/maps", statKey(&st))
	if got != exe {
		t.Errorf("scanMaps found %q, want %q", got, exe)
	}
}
