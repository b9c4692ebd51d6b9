package bench

import (
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/policies"
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
	ref, err := fileRef(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, gap := range []time.Duration{2 * time.Microsecond, 10 * time.Microsecond, 30 * time.Microsecond, 100 * time.Microsecond, 300 * time.Microsecond} {
		b.Run(gap.String(), func(b *testing.B) {
			if err := evictRetry(path, size); err != nil {
				b.Fatal(err)
			}
			reg := backend.NewRegistry()
			defer reg.Close()
			if _, err := reg.Add(ref); err != nil {
				b.Fatal(err)
			}
			var issued atomic.Int64
			k := backend.NewKernel(reg, backend.Options{Issued: func(uint32, uint64, uint64) { issued.Store(time.Now().UnixNano()) }})
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			pages := rand.Perm(size / os.Getpagesize())
			waits := make([]float64, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				for t0 := time.Now(); time.Since(t0) < gap; {
				}
				issued.Store(0)
				t0 := time.Now()
				if err := k.Submit(&policies.Request{File: 1, Ranges: []policies.Range{{First: uint64(pages[i%len(pages)]), N: 1}}}); err != nil {
					b.Fatal(err)
				}
				for issued.Load() == 0 {
					if time.Since(t0) > time.Second {
						b.Fatal("a request was not issued within 1 s")
					}
				}
				waits = append(waits, float64(issued.Load()-t0.UnixNano()))
			}
			b.StopTimer()
			r, err := k.Close()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(median(waits), "wake-ns")
			b.ReportMetric(float64(r.BusyNS-r.AcquireNS)/float64(b.N), "busy-ns")
		})
	}
}
