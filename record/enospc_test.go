package record

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
)

// smallFS mounts a fresh filesystem of size bytes and returns its mount
// point: ext4 on a loop device (mkfs.ext4 on a file, losetup), which
// behaves like a real disk (delayed allocation, a journal); tmpfs with
// size= where there is no loop device or mkfs.ext4. It says which.
func smallFS(t *testing.T, size int64) string {
	t.Helper()
	dir := tracetest.DiskDir(t)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "fs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.Close()
	_, err = exec.LookPath("mkfs.ext4")
	var loop []byte
	if err == nil {
		loop, err = exec.Command("losetup", "--find", "--show", img).Output()
	}
	if err == nil {
		dev := strings.TrimSpace(string(loop))
		t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4 %s: %v: %s", dev, err, out)
		}
		if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
			t.Fatalf("mount %s: %v", dev, err)
		}
		t.Logf("output on ext4 on %s (%d bytes)", dev, size)
	} else {
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
			t.Fatalf("mount tmpfs (there is no loop device or mkfs.ext4): %v", err)
		}
		t.Logf("output on tmpfs size=%d (no loop device or mkfs.ext4: %v)", size, err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	// Ballast, for the test to free space with once the disk is full.
	if err := os.WriteFile(filepath.Join(mnt, "ballast"), make([]byte, 512<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	return mnt
}

// TestENOSPC records a program making 1.5 M page-cache reads into a bundle
// on a 4 MiB filesystem, which fills. The recording fails with an error
// that names the cause and the bundle and says how to recover it; the
// program runs to its end regardless (it prints its timing last); and
// once space is freed, trace repair recovers the batches written before
// the disk filled, each access naming a file row with a path.
func TestENOSPC(t *testing.T) {
	requireRecorder(t, "filemap:mm_filemap_get_pages")
	mnt := smallFS(t, 4<<20)
	data := tracetest.WarmFile(t, tracetest.DiskDir(t), 16<<20)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(mnt, "bundle")
	var stdout strings.Builder
	_, err = Run(context.Background(), Config{
		Output:  out,
		Command: []string{"env", "PREDICTIO_RECORD_HELPER=pread", "PREDICTIO_RECORD_FILE=" + data, "PREDICTIO_RECORD_N=1500000", exe},
		Stdout:  &stdout, Stderr: os.Stderr,
	})
	if err == nil {
		t.Fatal("recording 1.5 M rows onto a 4 MiB filesystem succeeded")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), syscall.ENOSPC.Error()) || !strings.Contains(err.Error(), out) ||
		!strings.Contains(err.Error(), "trace repair") {
		t.Errorf("error %q: want the cause (%q), the bundle and what to do", err, syscall.ENOSPC.Error())
	}
	if f := strings.Fields(stdout.String()); len(f) != 2 {
		t.Errorf("the traced program did not finish: it printed %q", stdout.String())
	}
	// What the error says: free space, then repair.
	if err := os.Remove(filepath.Join(mnt, "ballast")); err != nil {
		t.Fatal(err)
	}
	rep, err := formats.Repair(out)
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
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
	n := 0
	for ac.Next() {
		if p := paths[ac.At().FileID]; p == "" {
			t.Fatalf("recovered access %+v names no file row with a path", *ac.At())
		}
		n++
	}
	if err := ac.Err(); err != nil {
		t.Fatal(err)
	}
	if n < formats.DefaultBatchRows {
		t.Errorf("recovered %d accesses, want at least one batch (%d)", n, formats.DefaultBatchRows)
	}
	t.Logf("recovered %d accesses in %d files: %v", n, len(files), rep.Notes)
}
