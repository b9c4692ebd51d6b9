package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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
			spin := func() {
				for t0 := time.Now(); time.Since(t0) < gap; {
				}
			}
			waits, _, r, err := wakePass(path, size, b.N, spin)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(median(waits), "wake-ns")
			b.ReportMetric(float64(r.BusyNS-r.AcquireNS)/float64(len(waits)), "busy-ns")
		})
	}
}
