package replay

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// MaterializeResult says what Materialize wrote.
type MaterializeResult struct {
	Files   int    // files the replay touches
	Written int    // files written
	Kept    int    // files already present with the recorded size and mtime
	Bytes   uint64 // bytes written
}

// Materialize writes every file the bundle's replay touches under dir, at
// its recorded path, with the recorded size and mtime. Content is
// deterministic (a function of file_id and offset), files are not sparse, and
// each is fsynced. A file already present with the recorded size and mtime
// is kept. Before writing anything it checks with statfs that dir's
// filesystem has room for the files to write; if not, the error wraps
// ErrNoSpace and says how much is needed and how much is free.
func Materialize(bundle, dir string) (*MaterializeResult, error) {
	t, err := loadTrace(bundle, false)
	if err != nil {
		return nil, err
	}
	return materializeTrace(t, dir)
}

// ErrNoSpace is wrapped by Materialize's error when dir's filesystem has
// too little free space or too few free inodes for the files. It is
// unix.ENOSPC, so errors.Is(err, unix.ENOSPC) holds too.
var ErrNoSpace = unix.ENOSPC

// toWrite is one file Materialize writes.
type toWrite struct {
	f    *fileInfo
	path string
}

func materializeTrace(t *trace, dir string) (*MaterializeResult, error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	res := &MaterializeResult{}
	var todo []toWrite
	for _, f := range t.used() {
		res.Files++
		p, err := pathFor(f, dir)
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && uint64(st.Size()) == f.Size &&
			(f.MtimeNS == 0 || st.ModTime().UnixNano() == f.MtimeNS) {
			res.Kept++
			continue
		}
		todo = append(todo, toWrite{f, p})
	}
	if err := checkSpace(dir, todo); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	for _, w := range todo {
		if err := ensureDir(filepath.Dir(w.path)); err != nil {
			return nil, err
		}
		n, err := writeFile(w.path, w.f.ID, w.f.Size, w.f.MtimeNS, buf)
		res.Bytes += n
		if err != nil {
			return nil, err
		}
		res.Written++
	}
	if err := materializeMeta(t, dir, res); err != nil {
		return nil, err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return res, nil
}

// spaceNeeded estimates the bytes and inodes that writing todo takes on a
// filesystem of block size bs: each file's data rounded up to whole blocks
// plus a block of metadata (an extent block, say) for a non-empty file, and
// an inode per file; a block and an inode per new parent directory. Files
// are replaced by rename after they are written, so the space of the files
// they replace is not counted as free.
func spaceNeeded(todo []toWrite, bs uint64) (bytes, inodes uint64) {
	dirs := map[string]bool{}
	for _, w := range todo {
		if w.f.Size > 0 {
			bytes += (w.f.Size+bs-1)/bs*bs + bs
		}
		inodes++
		if d := filepath.Dir(w.path); !dirs[d] {
			dirs[d] = true
			if _, err := os.Stat(d); err != nil {
				bytes += bs
				inodes++
			}
		}
	}
	return bytes, inodes
}

// checkSpace refuses todo when statfs says dir's filesystem lacks the
// space (f_bavail, what df shows as available) or the inodes for it.
func checkSpace(dir string, todo []toWrite) error {
	if len(todo) == 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("materialize: statfs %s: %w", dir, err)
	}
	bs := uint64(st.Frsize)
	if bs == 0 {
		bs = uint64(st.Bsize)
	}
	bs = max(bs, 512)
	need, inodes := spaceNeeded(todo, bs)
	if free := st.Bavail * bs; need > free {
		return fmt.Errorf("materialize: %s needs %s for %d files and has %s free: %w; free %s there or choose a DIR on a larger filesystem",
			dir, formatBytes(need), len(todo), formatBytes(free), ErrNoSpace, formatBytes(need-free))
	}
	// Filesystems without an inode limit (btrfs, tmpfs with nr_inodes=0)
	// report f_files 0.
	if st.Files > 0 && inodes > st.Ffree {
		return fmt.Errorf("materialize: %s needs %d inodes for %d files and has %d free: %w; choose a DIR on another filesystem",
			dir, inodes, len(todo), st.Ffree, ErrNoSpace)
	}
	return nil
}

// formatBytes formats n with a binary unit: 1.9 GiB, 512.0 MiB, 4096 B.
func formatBytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

// fillContent fills buf with the deterministic content of file id at offset
// off (a multiple of 8).
func fillContent(buf []byte, id uint32, off uint64) {
	for i := 0; i+8 <= len(buf); i += 8 {
		x := (uint64(id)+1)*0x9e3779b97f4a7c15 ^ (off + uint64(i))
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		binary.LittleEndian.PutUint64(buf[i:], x)
	}
}

func writeFile(p string, id uint32, size uint64, mtimeNS int64, buf []byte) (uint64, error) {
	tmp := p + ".predictio-tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, fmt.Errorf("materialize %s: %w", p, err)
	}
	var off uint64
	for off < size {
		n := uint64(len(buf))
		if size-off < n {
			n = size - off
		}
		fillContent(buf[:(n+7)&^7], id, off)
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			os.Remove(tmp)
			return off, fmt.Errorf("materialize %s: write: %w", p, err)
		}
		off += n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return off, fmt.Errorf("materialize %s: fsync: %w", p, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return off, fmt.Errorf("materialize %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return off, fmt.Errorf("materialize %s: %w", p, err)
	}
	if mtimeNS != 0 {
		ts := []unix.Timespec{unix.NsecToTimespec(time.Now().UnixNano()), unix.NsecToTimespec(mtimeNS)}
		if err := unix.UtimesNano(p, ts); err != nil {
			return off, fmt.Errorf("materialize %s: set mtime: %w", p, err)
		}
	}
	return off, nil
}
