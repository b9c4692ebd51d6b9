package rawsys

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCalls: each call does what its wrapper in x/sys/unix does, errors
// included, and a path call allocates nothing once its buffer has grown.
func TestCalls(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	data := []byte("hello, raw world")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var p Paths
	dfd, err := p.Openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(dfd)
	fd, err := p.Openat(dfd, "f", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := Pread(fd, buf, 7); err != nil || string(buf[:n]) != "raw world" {
		t.Errorf("Pread = %q, %v; want \"raw world\"", buf[:n], err)
	}
	if n, err := Read(fd, buf[:5]); err != nil || string(buf[:n]) != "hello" {
		t.Errorf("Read = %q, %v; want \"hello\" (from the file offset, which Pread leaves)", buf[:n], err)
	}
	var a, b unix.Stat_t
	if err := Fstat(fd, &a); err != nil {
		t.Fatal(err)
	}
	if err := p.Fstatat(dfd, "f", &b, 0); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Size != int64(len(data)) {
		t.Errorf("Fstat ino %d size %d, Fstatat ino %d; want one inode of %d bytes", a.Ino, a.Size, b.Ino, len(data))
	}
	if err := Close(fd); err != nil {
		t.Fatal(err)
	}
	if err := Close(fd); !errors.Is(err, unix.EBADF) {
		t.Errorf("a second Close = %v, want EBADF", err)
	}
	if n, err := Getdents(dfd, buf); err != nil || n == 0 {
		t.Errorf("Getdents = %d, %v; want entries", n, err)
	}
	if _, err := p.Openat(dfd, "missing", unix.O_RDONLY, 0); !errors.Is(err, unix.ENOENT) {
		t.Errorf("Openat of a missing file = %v, want ENOENT", err)
	}
	if _, err := p.Openat(dfd, "f\x00x", unix.O_RDONLY, 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Openat of a path with a NUL = %v, want EINVAL", err)
	}
	var st unix.Stat_t
	if n := testing.AllocsPerRun(100, func() { p.Fstatat(dfd, "f", &st, 0) }); n != 0 {
		t.Errorf("Fstatat allocates %v times a call, want 0", n)
	}
}

var walkList = flag.String("rawsys.files", "", "BenchmarkColdWalk: a file listing the paths to walk, one a line")

// BenchmarkColdWalk opens, reads to the end in 96 KiB reads and closes
// each file of -rawsys.files, cold (drop_caches before each iteration,
// root), through the runtime's wrappers or raw: what a replay of grep -r
// pays on each file (scripts/rawsys-ab.sh runs it beside a C loop).
func BenchmarkColdWalk(b *testing.B) {
	if *walkList == "" {
		b.Skip("no -rawsys.files")
	}
	data, err := os.ReadFile(*walkList)
	if err != nil {
		b.Fatal(err)
	}
	paths := strings.Fields(string(data))
	buf := make([]byte, 96<<10)
	for _, mode := range []string{"wrappers", "raw"} {
		b.Run(mode, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var p Paths
			for range b.N {
				b.StopTimer()
				unix.Sync()
				if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
					b.Skipf("drop caches: %v (needs root)", err)
				}
				b.StartTimer()
				for _, path := range paths {
					var fd int
					var err error
					if mode == "raw" {
						fd, err = p.Openat(unix.AT_FDCWD, path, unix.O_RDONLY, 0)
					} else {
						fd, err = unix.Open(path, unix.O_RDONLY, 0)
					}
					if err != nil {
						continue
					}
					for {
						var n int
						if mode == "raw" {
							n, err = Read(fd, buf)
						} else {
							n, err = unix.Read(fd, buf)
						}
						if n <= 0 || err != nil {
							break
						}
					}
					if mode == "raw" {
						Close(fd)
					} else {
						unix.Close(fd)
					}
				}
			}
		})
	}
}
