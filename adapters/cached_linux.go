package adapters

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Cached reports whether all of bytes [off, off+n) are in the page cache,
// from cachestat(2), without reading them. Needs Linux 6.5 for cachestat;
// on older kernels it returns ErrNotSupported.
func (c OSContent) Cached(off, n int64) (bool, error) {
	if n <= 0 || off < 0 {
		return false, nil
	}
	ps := int64(os.Getpagesize())
	want := (off+n-1)/ps - off/ps + 1
	r := unix.CachestatRange{Off: uint64(off / ps * ps), Len: uint64(want * ps)}
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(c.Fd()), &r, &st, 0); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return false, ErrNotSupported
		}
		return false, err
	}
	return int64(st.Cache) >= want, nil
}
