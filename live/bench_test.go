package live

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/predictio/predictio/source"
)

// BenchmarkRunOverhead measures what `predictio run -- CMD` adds around a
// command, as a shell sees it: from invoking predictio to CMD's exec, and
// from CMD's exit to predictio's exit, each minus the same interval for
// CMD run directly. CMD is this test binary printing CLOCK_MONOTONIC as
// the first and last thing it does (tracetest's stamp helper). Each
// iteration runs one direct and one wrapped command, alternating which
// goes first; metrics are medians. Sub-benchmarks: noop (--no-profile
// --backend none: tracing and the loop, no policy), profile (a learned
// profile of the helper, launch + markov, the kernel backend). It builds
// ./cmd/predictio, or uses $PREDICTIO_BIN. Run with -benchtime=20x.
func BenchmarkRunOverhead(b *testing.B) {
	requireSource(b)
	bin := predictioBin(b)
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	prof := filepath.Join(b.TempDir(), "profiles")
	for _, bc := range []struct {
		name string
		args []string
	}{
		{"noop", []string{"--no-profile", "--backend", "none"}},
		{"profile", []string{"--profile", prof}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			args := append(append([]string{"run", "--daemon-socket", ""}, bc.args...), "--", exe)
			// Warm up: the BTF cache, and a profile learned.
			for range 3 {
				if _, _, err := stampedRun(bin, exe, args); err != nil {
					b.Fatal(err)
				}
			}
			var pre, post, pre0, post0, total []float64
			b.ResetTimer()
			for i := range b.N {
				var d [2][2]float64 // [direct, wrapped][pre, post]
				for _, wrapped := range [][]bool{{false, true}, {true, false}}[i%2] {
					var a []string
					if wrapped {
						a = args
					}
					p, q, err := stampedRun(bin, exe, a)
					if err != nil {
						b.Fatal(err)
					}
					k := 0
					if wrapped {
						k = 1
					}
					d[k] = [2]float64{p, q}
				}
				pre0, post0 = append(pre0, d[0][0]), append(post0, d[0][1])
				pre, post = append(pre, d[1][0]), append(post, d[1][1])
				total = append(total, d[1][0]-d[0][0]+d[1][1]-d[0][1])
			}
			b.StopTimer()
			b.ReportMetric(median(pre)-median(pre0), "to-exec-ms")
			b.ReportMetric(median(post)-median(post0), "after-exit-ms")
			b.ReportMetric(median(total), "overhead-ms")
			b.ReportMetric(slices.Min(total), "overhead-min-ms")
			b.ReportMetric(median(pre0)+median(post0), "direct-ms")
		})
	}
}

// stampedRun runs the stamp helper directly (args nil) or as bin args...,
// and returns the milliseconds from starting the process to the helper's
// stamp and from the stamp to the process's exit.
func stampedRun(bin, exe string, args []string) (pre, post float64, err error) {
	cmd := exec.Command(exe)
	if args != nil {
		cmd = exec.Command(bin, args...)
	}
	cmd.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER=stamp", "PREDICTIO_LIVE_HELPER=")
	cmd.Stderr = os.Stderr
	t0 := source.MonotonicNow()
	out, err := cmd.Output()
	t1 := source.MonotonicNow()
	if err != nil {
		return 0, 0, err
	}
	s, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, 0, errors.New("stamp helper printed " + strconv.Quote(string(out)))
	}
	return float64(s-t0) / 1e6, float64(t1-s) / 1e6, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// predictioBin returns $PREDICTIO_BIN or a fresh build of ./cmd/predictio.
func predictioBin(b testing.TB) string {
	if p := os.Getenv("PREDICTIO_BIN"); p != "" {
		return p
	}
	if _, err := exec.LookPath("go"); err != nil {
		b.Skip("go tool not on PATH to build ./cmd/predictio; set PREDICTIO_BIN to a predictio binary")
	}
	return buildPredictio(b)
}
