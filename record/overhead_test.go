package record

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/predictio/predictio/internal/tracetest"
	"github.com/predictio/predictio/source"
)

// BenchmarkCommandOverhead measures what `predictio record -- CMD` adds
// around a command, as a shell sees it: from invoking predictio to CMD's
// exec, and from CMD's exit to predictio's exit, each minus the same
// interval for CMD run directly (process creation and CMD's start-up
// cancel out). CMD is this test binary printing CLOCK_MONOTONIC as the
// first and last thing it does. Each iteration runs one direct and one
// recorded command, alternating which goes first; the metrics are medians
// over the iterations. It builds ./cmd/predictio with the go tool, or uses
// the binary in $PREDICTIO_BIN. Run with -benchtime=20x.
func BenchmarkCommandOverhead(b *testing.B) {
	requireRecorder(b)
	bin := predictioBinary(b)
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := tracetest.DiskDir(b)
	// The first recording on a kernel builds the BTF cache; measure the
	// steady state.
	if _, _, err := stamped(bin, exe, filepath.Join(dir, "warm")); err != nil {
		b.Fatal(err)
	}
	var pre, post, pre0, post0, total []float64 // median sorts them: report last
	b.ResetTimer()
	for i := range b.N {
		var d [2][2]float64 // [direct, recorded][pre, post]
		for _, rec := range [][]bool{{false, true}, {true, false}}[i%2] {
			out := ""
			if rec {
				out = filepath.Join(dir, "b"+strconv.Itoa(i))
			}
			p, q, err := stamped(bin, exe, out)
			if err != nil {
				b.Fatal(err)
			}
			k := 0
			if rec {
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
}

// stamped runs the stamp helper directly (out "") or under predictio
// record -o out, and returns the milliseconds from starting the process to
// the helper's stamp and from the stamp to the process's exit.
func stamped(bin, exe, out string) (pre, post float64, err error) {
	var cmd *exec.Cmd
	if out == "" {
		cmd = exec.Command(exe)
	} else {
		cmd = exec.Command(bin, "record", "-o", out, "--quiet", "--", exe)
	}
	cmd.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER=stamp")
	cmd.Stderr = os.Stderr
	t0 := source.MonotonicNow()
	b, err := cmd.Output()
	t1 := source.MonotonicNow()
	if err != nil {
		return 0, 0, err
	}
	s, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, 0, errors.New("stamp helper printed " + strconv.Quote(string(b)))
	}
	return float64(s-t0) / 1e6, float64(t1-s) / 1e6, nil
}

// predictioBinary returns $PREDICTIO_BIN or a fresh build of ./cmd/predictio.
func predictioBinary(b *testing.B) string {
	if p := os.Getenv("PREDICTIO_BIN"); p != "" {
		return p
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		b.Skip("go tool not on PATH to build ./cmd/predictio; set PREDICTIO_BIN to a predictio binary")
	}
	bin := filepath.Join(b.TempDir(), "predictio")
	build := exec.Command(gobin, "build", "-o", bin, "../cmd/predictio")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		b.Fatalf("build predictio: %v", err)
	}
	return bin
}
