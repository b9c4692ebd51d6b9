package train

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

// BenchmarkMarkov10Runs trains on 10 synthetic launch runs (pattern
// sparse) of 1 M events each; one op is one whole training. The bundles
// are written once, outside the timed region.
func BenchmarkMarkov10Runs(b *testing.B) {
	const runs, events = 10, 1_000_000
	base := b.TempDir()
	var dirs []string
	for r := 0; r < runs; r++ {
		d := filepath.Join(base, fmt.Sprint(r))
		if err := formats.Synth(d, formats.SynthSpec{Pattern: "sparse", Events: events, Run: r}); err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	b.ResetTimer()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for i := 0; i < b.N; i++ {
		if _, err := Markov(dirs); err != nil {
			b.Fatal(err)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(runs*events)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mevents/s")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}
