package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// LoopOptions configures NewLoopFS.
type LoopOptions struct {
	// Size is the filesystem image in bytes (default 64 MiB). ext4 needs
	// at least about 2 MiB.
	Size int64
	// FSType is the filesystem: ext4 (default), ext2 or anything that
	// mkfs.FSTYPE makes and the kernel mounts.
	FSType string
	// ReadaheadKB sets the loop device's queue/read_ahead_kb; 0 keeps the
	// kernel's default (128 KiB).
	ReadaheadKB int
	// DirectIO makes the loop device read its backing file with O_DIRECT,
	// so that the backing file's pages are not cached a second time (and
	// evicting the filesystem's own pages really costs a read).
	DirectIO bool
}

// LoopFS is a private filesystem on a loop device of the test's own: free
// space, readahead and page cache that no other test shares.
type LoopFS struct {
	Dir    string // the mount point
	Device string // /dev/loopN
	Image  string // the backing file
}

// NewLoopFS makes a filesystem image under /var/tmp (or the temp dir),
// attaches it to a free loop device (LOOP_CONFIGURE with autoclear, Linux
// 5.8), mounts it and returns it; the test's cleanup unmounts it, which
// detaches the device, and removes the image. It is for ENOSPC tests (a
// filesystem that fills at Size) and for readahead and page-cache tests
// that must not see other processes' I/O.
//
// Needs CAP_SYS_ADMIN, /dev/loop-control and mkfs.FSTYPE (e2fsprogs,
// installed by scripts/setup.sh). Where the kernel or the process lacks
// what a loop filesystem needs, the test is skipped with a message naming
// exactly that; a missing mkfs is a setup error and fails the test.
func NewLoopFS(t testing.TB, o LoopOptions) *LoopFS {
	t.Helper()
	if o.Size == 0 {
		o.Size = 64 << 20
	}
	if o.FSType == "" {
		o.FSType = "ext4"
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("loop filesystem: no /dev/loop-control (%v): this kernel has no loop device driver", err)
	}
	if !hasCapSysAdmin() {
		t.Skip("loop filesystem: needs CAP_SYS_ADMIN to attach a loop device and mount it")
	}
	mkfs, err := exec.LookPath("mkfs." + o.FSType)
	if err != nil {
		t.Fatalf("loop filesystem: %v; run scripts/setup.sh (e2fsprogs)", err)
	}
	base := os.TempDir()
	if st, err := os.Stat("/var/tmp"); err == nil && st.IsDir() {
		base = "/var/tmp"
	}
	dir, err := os.MkdirTemp(base, "predictio-loopfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l := &LoopFS{Dir: filepath.Join(dir, "mnt"), Image: filepath.Join(dir, "image")}
	if err := os.WriteFile(l.Image, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(l.Image, o.Size); err != nil {
		t.Fatal(err)
	}
	args := []string{"-q", "-F", l.Image}
	if strings.HasPrefix(o.FSType, "ext") {
		// No reserved blocks: free space as df shows it is all usable.
		args = append([]string{"-m", "0"}, args...)
	}
	if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
		t.Fatalf("loop filesystem: %s %s: %v: %s", mkfs, strings.Join(args, " "), err, out)
	}
	loop, err := attachLoop(l.Image, o.DirectIO)
	if err != nil {
		if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
			t.Skipf("loop filesystem: LOOP_CONFIGURE: %v: needs Linux 5.8", err)
		}
		t.Fatalf("loop filesystem: %v", err)
	}
	l.Device = loop.Name()
	if err := os.Mkdir(l.Dir, 0o755); err != nil {
		loop.Close()
		t.Fatal(err)
	}
	err = unix.Mount(l.Device, l.Dir, o.FSType, 0, "")
	loop.Close() // the mount holds the device now; autoclear detaches it at unmount
	if errors.Is(err, unix.ENODEV) {
		t.Skipf("loop filesystem: mount %s: %v: this kernel has no %s", l.Device, err, o.FSType)
	}
	if err != nil {
		t.Fatalf("loop filesystem: mount %s on %s: %v", l.Device, l.Dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(l.Dir, 0); err != nil {
			unix.Unmount(l.Dir, unix.MNT_DETACH)
		}
	})
	if o.ReadaheadKB > 0 {
		ra := filepath.Join("/sys/block", filepath.Base(l.Device), "queue/read_ahead_kb")
		if err := os.WriteFile(ra, []byte(strconv.Itoa(o.ReadaheadKB)), 0); err != nil {
			t.Fatalf("loop filesystem: set %s: %v", ra, err)
		}
	}
	return l
}

// attachLoop attaches image to a free loop device and returns the device,
// open. Another process may take the free device first; then it retries.
func attachLoop(image string, directIO bool) (*os.File, error) {
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if directIO {
			cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
		}
		copy(cfg.Info.File_name[:], "predictio-test:"+filepath.Base(filepath.Dir(image)))
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) || try == 20 {
			return nil, fmt.Errorf("LOOP_CONFIGURE %s: %w", dev.Name(), err)
		}
	}
}

// hasCapSysAdmin reports whether the process has CAP_SYS_ADMIN in its
// effective set.
func hasCapSysAdmin() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return os.Geteuid() == 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && c&(1<<unix.CAP_SYS_ADMIN) != 0
		}
	}
	return false
}

// Free returns the bytes an unprivileged writer may still use (statfs
// f_bavail × f_frsize).
func (l *LoopFS) Free(t testing.TB) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(l.Dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Frsize
}
