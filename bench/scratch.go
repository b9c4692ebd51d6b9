package bench

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// BlockSize is the I/O size of the random-I/O benchmarks and the alignment
// O_DIRECT needs.
const BlockSize = 4096

// ErrNoDirectIO means the scratch file's filesystem does not honour O_DIRECT
// (tmpfs, for example), so results would measure memory, not the device.
var ErrNoDirectIO = errors.New("O_DIRECT is not honoured")

// PrepareScratch makes path a file of at least size bytes (a multiple of
// 1 MiB) filled with non-zero data written with O_DIRECT, so that reads hit
// allocated blocks on the device rather than holes. It refuses filesystems
// where O_DIRECT is not honoured: tmpfs by type, others by probing an
// O_DIRECT open and an aligned read.
func PrepareScratch(path string, size int64, log io.Writer) error {
	if size < BlockSize || size%(1<<20) != 0 {
		return fmt.Errorf("prepare scratch file %s: size %d is not a positive multiple of 1 MiB", path, size)
	}
	dir := path
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		dir = dirOf(path)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("prepare scratch file %s: statfs %s: %w", path, dir, err)
	}
	if fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC {
		return fmt.Errorf("prepare scratch file %s: %w on tmpfs/ramfs (every read would come from memory); pass --file on a disk filesystem such as /var/tmp", path, ErrNoDirectIO)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o644)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("prepare scratch file %s: %w by this filesystem (open with O_DIRECT: %v); pass --file on another filesystem", path, ErrNoDirectIO, err)
		}
		return fmt.Errorf("prepare scratch file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("prepare scratch file: %w", err)
	}
	const chunk = 1 << 20
	buf, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("prepare scratch file %s: map buffer: %w", path, err)
	}
	defer unix.Munmap(buf)
	start := st.Size() / chunk * chunk
	if start < size {
		fmt.Fprintf(log, "filling %s from %d to %d MiB with O_DIRECT writes\n", path, start>>20, size>>20)
		x := uint64(0x9e3779b97f4a7c15)
		for off := start; off < size; off += chunk {
			for i := 0; i+8 <= len(buf); i += 8 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				for j := 0; j < 8; j++ {
					buf[i+j] = byte(x>>(8*j)) | 1
				}
			}
			if _, err := unix.Pwrite(int(f.Fd()), buf, off); err != nil {
				return fmt.Errorf("prepare scratch file %s: write at %d: %w", path, off, err)
			}
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("prepare scratch file %s: fsync: %w", path, err)
		}
	}
	if _, err := unix.Pread(int(f.Fd()), buf[:BlockSize], 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("prepare scratch file %s: %w (an aligned O_DIRECT read failed: %v)", path, ErrNoDirectIO, err)
		}
		return fmt.Errorf("prepare scratch file %s: probe read: %w", path, err)
	}
	return nil
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			if i == 0 {
				return "/"
			}
			return path[:i]
		}
	}
	return "."
}

// CachedPages returns how many of the first size bytes of path are in the
// page cache (cachestat). Needs Linux 6.5.
func CachedPages(path string, size int64) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("cachestat %s: %w", path, err)
	}
	defer f.Close()
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: 0, Len: uint64(size)}, &cs, 0); err != nil {
		return 0, fmt.Errorf("cachestat %s (needs Linux 6.5): %w", path, err)
	}
	return cs.Cache, nil
}

// EnsureCold checks that no page of the file is cached; if some are, it
// drops them (fsync + POSIX_FADV_DONTNEED) and checks again. It returns the
// number of pages found cached before dropping.
func EnsureCold(path string, size int64) (uint64, error) {
	n, err := CachedPages(path, size)
	if err != nil || n == 0 {
		return n, err
	}
	f, err := os.Open(path)
	if err != nil {
		return n, fmt.Errorf("drop cache of %s: %w", path, err)
	}
	defer f.Close()
	f.Sync()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return n, fmt.Errorf("drop cache of %s: %w", path, err)
	}
	left, err := CachedPages(path, size)
	if err != nil {
		return n, err
	}
	if left != 0 {
		return n, fmt.Errorf("%d pages of %s stay in the page cache after POSIX_FADV_DONTNEED; is another process using it? Results would not measure the device", left, path)
	}
	return n, nil
}
