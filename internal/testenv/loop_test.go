package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLoopFS fills a 16 MiB loop filesystem to ENOSPC, checks its
// read_ahead_kb, and checks that the cleanup unmounts it and detaches the
// loop device.
func TestLoopFS(t *testing.T) {
	var l *LoopFS
	t.Run("fill", func(t *testing.T) {
		l = NewLoopFS(t, LoopOptions{Size: 16 << 20, ReadaheadKB: 256, DirectIO: true})
		var st unix.Statfs_t
		if err := unix.Statfs(l.Dir, &st); err != nil {
			t.Fatal(err)
		}
		if st.Type != unix.EXT4_SUPER_MAGIC {
			t.Fatalf("%s: filesystem type %#x, want ext4", l.Dir, st.Type)
		}
		free := l.Free(t)
		if free <= 8<<20 || free > 16<<20 {
			t.Fatalf("free %d bytes on a 16 MiB filesystem", free)
		}
		ra, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(l.Device), "queue/read_ahead_kb"))
		if err != nil || strings.TrimSpace(string(ra)) != "256" {
			t.Fatalf("read_ahead_kb %q, %v; want 256", ra, err)
		}
		f, err := os.Create(filepath.Join(l.Dir, "fill"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		var n int64
		for err == nil {
			var k int
			k, err = f.Write(buf)
			n += int64(k)
			if err == nil && n > 32<<20 {
				t.Fatalf("wrote %d bytes to a 16 MiB filesystem without ENOSPC", n)
			}
		}
		if !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("write after %d bytes: %v, want ENOSPC", n, err)
		}
		if n < free/2 {
			t.Fatalf("ENOSPC after %d bytes with %d free", n, free)
		}
		t.Logf("%s on %s: %d bytes free, ENOSPC after %d", l.Dir, l.Device, free, n)
	})
	if l == nil {
		return // skipped
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil {
		t.Error(err)
	} else if strings.Contains(string(mi), " "+l.Dir+" ") {
		t.Errorf("%s still mounted after the test", l.Dir)
	}
	backing := filepath.Join("/sys/block", filepath.Base(l.Device), "loop/backing_file")
	if b, err := os.ReadFile(backing); err == nil && strings.Contains(string(b), filepath.Dir(l.Image)) {
		t.Errorf("%s still attached to %s", l.Device, b)
	}
}
