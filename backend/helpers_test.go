package backend

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/testenv"
)

// scratchDir returns a directory on a disk filesystem (O_DIRECT and the
// page cache behave as on a real device there; /tmp may be tmpfs).
func scratchDir(t testing.TB) string {
	t.Helper()
	return testenv.ScratchDir(t, "predictio-backend-test-", "backend tests need a disk filesystem (not tmpfs) at /var/tmp or the temp dir for O_DIRECT and page-cache eviction")
}

// refOf registers path as id with the identity it has now.
func refOf(t testing.TB, id uint32, path string) FileRef {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return FileRef{ID: id, Dev: formats.KernelDev(st.Dev), Ino: st.Ino, Path: path}
}

// evictFile drops f's cached pages with POSIX_FADV_DONTNEED (only this
// file: other packages' tests run at the same time) and fails the test if
// any stays.
func evictFile(t testing.TB, f *os.File) {
	t.Helper()
	fd := int(f.Fd())
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	c, err := cachedPages(fd, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c != 0 {
		t.Fatalf("evict %s: %d pages stay cached", f.Name(), c)
	}
}

// writeFile writes a pages-page pattern file under dir and returns its path.
func writeFile(t testing.TB, dir, name string, pages int) string {
	t.Helper()
	p := dir + "/" + name
	testenv.WritePattern(t, p, pages*os.Getpagesize())
	return p
}
