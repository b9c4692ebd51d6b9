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
// is kept.
func Materialize(bundle, dir string) (*MaterializeResult, error) {
	t, err := loadTrace(bundle)
	if err != nil {
		return nil, err
	}
	return materializeTrace(t, dir)
}

func materializeTrace(t *trace, dir string) (*MaterializeResult, error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	res := &MaterializeResult{}
	buf := make([]byte, 1<<20)
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
		if err := ensureDir(filepath.Dir(p)); err != nil {
			return nil, err
		}
		n, err := writeFile(p, f.ID, f.Size, f.MtimeNS, buf)
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
