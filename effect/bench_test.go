package effect

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/testenv"
)

// BenchmarkPreadHot measures what the observer costs a demand thread: 4 KiB
// preads of a cached file, without the observer, with a lazy observer and
// no demand thread (no system call hooks), with it loaded but the file not
// watched, and with the file watched and the thread a demand thread
// (nothing pending, so each read costs the hooks' lookups).
//
//	go test -run '^$' -bench PreadHot -benchtime 2000000x ./effect
func BenchmarkPreadHot(b *testing.B) {
	dir := testenv.ScratchDir(b, "predictio-effect-bench-", "needs a disk filesystem at /var/tmp")
	p := filepath.Join(dir, "hot")
	testenv.WritePattern(b, p, 64*ps)
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	buf := make([]byte, ps)
	loop := func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := unix.Pread(fd, buf, int64(i%64)*ps); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("no-observer", loop)
	lazy, err := NewObserver(Options{LazyReads: true})
	if err != nil {
		b.Skip(err)
	}
	b.Run("lazy-idle", loop)
	lazy.Close()
	ob, err := NewObserver(Options{})
	if err != nil {
		b.Skip(err)
	}
	defer ob.Close()
	b.Run("unwatched", loop)
	var st unix.Stat_t
	unix.Fstat(fd, &st)
	if err := ob.Watch(1, formats.KernelDev(st.Dev), st.Ino); err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ob.AddDemandThread(unix.Gettid())
	b.Run("watched-demand", loop)
}
