package faultfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/internal/testenv"
)

const (
	fileSize = 1 << 20
	badOff   = 256 << 10 // one bad page at 256 KiB
	page     = 4096
)

func backing(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "backing")
	testenv.WritePattern(t, p, fileSize)
	return p
}

func want(off, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = testenv.Pattern(off + int64(i))
	}
	return b
}

// alignedBuf returns a page-aligned buffer for O_DIRECT.
func alignedBuf(t *testing.T, n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// checkReads reads one page at each offset of f and wants the backing
// bytes, or EIO at the bad page.
func checkReads(t *testing.T, f *os.File, buf []byte, offs ...int64) {
	t.Helper()
	for _, off := range offs {
		n, err := f.ReadAt(buf[:page], off)
		bad := off < badOff+page && badOff < off+page
		switch {
		case bad && !errors.Is(err, unix.EIO):
			t.Errorf("%s: read at %d: %d bytes, %v; want EIO", f.Name(), off, n, err)
		case !bad && (err != nil || n != page):
			t.Errorf("%s: read at %d: %d bytes, %v; want a page", f.Name(), off, n, err)
		case !bad && !bytes.Equal(buf[:page], want(off, page)):
			t.Errorf("%s: read at %d: wrong bytes", f.Name(), off)
		}
	}
}

// TestFaultFS reads good ranges and gets EIO on the bad one, through the
// page cache (where readahead over the bad page must not break the good
// page before it), with O_DIRECT, and on a DirectIO mount.
func TestFaultFS(t *testing.T) {
	src := backing(t)
	files := []File{{Name: "data", Backing: src, Faults: []Range{{Off: badOff, Len: page}}}}

	t.Run("page-cache", func(t *testing.T) {
		m := MountT(t, files, Options{})
		f, err := os.Open(m.Path("data"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || st.Size() != fileSize {
			t.Fatalf("stat: %v, %v; want %d bytes", st, err, fileSize)
		}
		buf := make([]byte, page)
		// The page before the bad one first: its readahead covers the bad
		// page, which fails, and the good page is read again on its own.
		checkReads(t, f, buf, badOff-page, 0, badOff, badOff+page, fileSize-page, badOff)
		if s := m.Stats(); s.Faults == 0 || s.Bytes == 0 {
			t.Errorf("stats %+v: want faulted and served reads", s)
		}
		// A cached page is served without faultfs.
		before := m.Stats().Reads
		checkReads(t, f, buf, 0)
		if after := m.Stats().Reads; after != before {
			t.Errorf("a cached page cost %d FUSE reads", after-before)
		}
		// Clearing the faults makes the bad page readable.
		if err := m.SetFaults("data", nil); err != nil {
			t.Fatal(err)
		}
		if n, err := f.ReadAt(buf, badOff); err != nil || n != page || !bytes.Equal(buf, want(badOff, page)) {
			t.Errorf("read at %d after SetFaults(nil): %d, %v", badOff, n, err)
		}
	})

	t.Run("O_DIRECT", func(t *testing.T) {
		m := MountT(t, files, Options{})
		f, err := os.OpenFile(m.Path("data"), os.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			t.Fatalf("open O_DIRECT: %v", err)
		}
		defer f.Close()
		checkReads(t, f, alignedBuf(t, page), badOff, 0, badOff-page, badOff+page)
		// O_DIRECT reads are one request each: the bad page was asked
		// for once.
		if s := m.Stats(); s.Faults != 1 {
			t.Errorf("stats %+v: want exactly one faulted request", s)
		}
	})

	t.Run("DirectIO", func(t *testing.T) {
		m := MountT(t, files, Options{DirectIO: true})
		f, err := os.Open(m.Path("data"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, page)
		checkReads(t, f, buf, 0, badOff, badOff-page)
		before := m.Stats().Reads
		checkReads(t, f, buf, 0) // no cache: every read reaches faultfs
		if after := m.Stats().Reads; after == before {
			t.Errorf("DirectIO: a repeated read was served from the page cache")
		}
	})

	t.Run("mmap", func(t *testing.T) {
		m := MountT(t, files, Options{})
		f, err := os.Open(m.Path("data"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := unix.Mmap(int(f.Fd()), 0, fileSize, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatalf("mmap: %v", err)
		}
		defer unix.Munmap(b)
		if got, want := b[badOff-page], testenv.Pattern(badOff-page); got != want {
			t.Errorf("mapped byte at %d is %d, want %d", badOff-page, got, want)
		}
		if !faults(func() { sink = b[badOff+100] }) {
			t.Errorf("touching the bad page through a mapping did not fault (SIGBUS)")
		}
		if faults(func() { sink = b[badOff+page] }) {
			t.Errorf("touching the page after the bad one faulted")
		}
	})

	t.Run("read-only", func(t *testing.T) {
		m := MountT(t, files, Options{})
		if _, err := os.OpenFile(m.Path("data"), os.O_WRONLY, 0); !errors.Is(err, unix.EROFS) {
			t.Errorf("open for writing: %v, want EROFS", err)
		}
		if _, err := os.Stat(m.Path("missing")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat missing: %v, want ENOENT", err)
		}
	})
}

func TestMountErrors(t *testing.T) {
	dir := t.TempDir()
	for _, files := range [][]File{
		{{Name: "a", Backing: filepath.Join(dir, "nope")}},
		{{Name: "a", Backing: dir}},
		{{Name: "", Backing: backing(t)}},
	} {
		if m, err := Mount(t.TempDir(), files, Options{}); err == nil {
			m.Unmount()
			t.Errorf("Mount(%+v) succeeded", files)
		}
	}
}

func TestRangeOverlaps(t *testing.T) {
	r := Range{Off: 100, Len: 10}
	for _, c := range []struct {
		off, n int64
		want   bool
	}{{0, 100, false}, {0, 101, true}, {109, 1, true}, {110, 5, false}, {105, 0, false}} {
		if got := r.overlaps(c.off, c.n); got != c.want {
			t.Errorf("%+v.overlaps(%d, %d) = %v", r, c.off, c.n, got)
		}
	}
}

// sink keeps a load from a mapping from being optimized away.
var sink byte

// faults reports whether f panicked with a memory fault (SIGBUS or SIGSEGV
// on a mapping, turned into a panic by debug.SetPanicOnFault).
func faults(f func()) (faulted bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(interface{ Addr() uintptr }); ok && e.Addr() != 0 {
				faulted = true
				return
			}
			panic(r)
		}
	}()
	f()
	return false
}
