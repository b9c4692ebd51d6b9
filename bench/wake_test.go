package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/internal/blockdev"
	"golang.org/x/sys/unix"
)

// BenchmarkBackendWake submits one-page requests of an uncached file to a
// kernel backend, each after the backend has been idle for the gap (spun
// since the last was issued), and reports the median time from Submit to
// its issuing (wake-ns) and the backend's own time a request, less
// opening the file (busy-ns): what the host model's waking and issue
// costs are for a backend fed every few microseconds rather than all at
// once (docs/BENCHMARKS.md, "Tried and not kept: a paced backend cost").
//
//	go test -run '^$' -bench BackendWake -benchtime 300x ./bench
func BenchmarkBackendWake(b *testing.B) {
	path := filepath.Join(scratchDir(b), "wake.dat")
	const size = 64 << 20
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, gap := range []time.Duration{2 * time.Microsecond, 10 * time.Microsecond, 30 * time.Microsecond, 100 * time.Microsecond, 300 * time.Microsecond} {
		b.Run(gap.String(), func(b *testing.B) {
			spin := func() { spinUntil(time.Now().Add(gap)) }
			waits, _, r, err := wakePass(path, size, b.N, spin)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(median(waits), "wake-ns")
			b.ReportMetric(float64(r.BusyNS-r.AcquireNS)/float64(len(waits)), "busy-ns")
		})
	}
}

// BenchmarkMissAmidPrefetch reads random pages of an uncached file one at
// a time (4 KiB preads, readahead off), each requested ahead pages earlier
// from a kernel backend (0: none), as a policy's stream would, with every
// 20th read of a page never requested: a demand miss. It reports the
// misses' mean latency (miss-us), the mean number of reads in the
// device's queue when they started (miss-depth, the disk's sysfs
// inflight), and the mean latency of the misses that started 0-7, 8-31
// and 32 or more deep: what a demand read costs beside prefetches in
// flight, against the device profile's queue and synchronous curves at
// that depth (docs/BENCHMARKS.md).
//
//	go test -run '^$' -bench MissAmidPrefetch -benchtime 10000x ./bench
func BenchmarkMissAmidPrefetch(b *testing.B) {
	path := filepath.Join(scratchDir(b), "miss.dat")
	const size = 512 << 20
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		b.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		b.Fatal(err)
	}
	maj, mnr := unix.Major(st.Dev), unix.Minor(st.Dev)
	if _, err := blockdev.Attr("/sys", maj, mnr, "inflight"); err != nil {
		b.Skipf("no sysfs inflight for the scratch file's device %d:%d: %v", maj, mnr, err)
	}
	for _, ahead := range []int{0, 32, 128} {
		b.Run(fmt.Sprintf("ahead-%d", ahead), func(b *testing.B) {
			r, err := missPass(path, size, b.N, ahead, maj, mnr)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.mean(), "miss-us")
			b.ReportMetric(r.depth/float64(max(r.n, 1)), "miss-depth")
			for i, name := range []string{"miss-us-d0-7", "miss-us-d8-31", "miss-us-d32+"} {
				if r.byDepthN[i] > 0 {
					b.ReportMetric(r.byDepth[i]/float64(r.byDepthN[i]), name)
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// missStats are the demand misses of a missPass, in microseconds.
type missStats struct {
	n, sum, depth float64
	byDepth       [3]float64
	byDepthN      [3]int
}

func (m *missStats) mean() float64 { return m.sum / max(m.n, 1) }

// add counts a miss of us microseconds that started depth reads deep.
func (m *missStats) add(us float64, depth uint64) {
	m.n++
	m.sum += us
	m.depth += float64(depth)
	k := 0
	if depth >= 32 {
		k = 2
	} else if depth >= 8 {
		k = 1
	}
	m.byDepth[k] += us
	m.byDepthN[k]++
}

// missPass evicts path and reads n of its pages as BenchmarkMissAmidPrefetch
// says, from one OS thread.
func missPass(path string, size int64, n, ahead int, maj, mnr uint32) (missStats, error) {
	var m missStats
	_, err := withColdBackend(path, size, backend.Options{}, func(kb *backend.Kernel) (err error) {
		m, err = missReads(kb, path, size, n, ahead, maj, mnr)
		return err
	})
	return m, err
}

// missReads is missPass's reads through the backend kb.
func missReads(kb *backend.Kernel, path string, size int64, n, ahead int, maj, mnr uint32) (missStats, error) {
	var m missStats
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return m, err
	}
	defer unix.Close(fd)
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
		return m, err
	}
	pages := int(size / int64(os.Getpagesize()))
	perm := rand.Perm(pages)
	n = min(n, pages*9/10)
	seq, miss := perm[:n], perm[n:]
	request := func(i int) error {
		if ahead == 0 || i >= n {
			return nil
		}
		return kb.Submit(onePage(seq[i]))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := range ahead {
		if err := request(i); err != nil {
			return m, err
		}
	}
	buf := make([]byte, os.Getpagesize())
	for i := range n {
		if err := request(i + ahead); err != nil {
			return m, err
		}
		spinUntil(time.Now().Add(2 * time.Microsecond))
		p, forced := seq[i], i%20 == 10
		var depth uint64
		if forced {
			p = miss[i/20%len(miss)]
			s, err := blockdev.Attr("/sys", maj, mnr, "inflight")
			if err != nil {
				return m, err
			}
			fmt.Sscan(s, &depth)
		}
		t0 := time.Now()
		if _, err := unix.Pread(fd, buf, int64(p)*int64(len(buf))); err != nil {
			return m, err
		}
		if forced {
			m.add(float64(time.Since(t0).Nanoseconds())/1e3, depth)
		}
	}
	return m, nil
}
