package record

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/predictio/predictio/internal/tracetest"
)

// runHelper runs this test binary as helper mode on file and returns the
// wall and CPU nanoseconds the helper's loop reported; with rec it runs
// under Run.
func runHelper(b *testing.B, mode, file string, n int, rec bool) (wall, cpu float64) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	env := []string{"PREDICTIO_RECORD_HELPER=" + mode, "PREDICTIO_RECORD_FILE=" + file, "PREDICTIO_RECORD_N=" + strconv.Itoa(n)}
	var out strings.Builder
	if rec {
		args := append(append([]string{"env"}, env...), exe)
		sum, err := Run(context.Background(), Config{
			Output: filepath.Join(tracetest.DiskDir(b), "bundle"), Command: args, Stdout: &out, Stderr: os.Stderr,
		})
		if err != nil {
			b.Fatal(err)
		}
		if sum.Dropped > 0 {
			b.Logf("%s: %d events dropped", mode, sum.Dropped)
		}
	} else {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := fmt.Sscan(out.String(), &wall, &cpu); err != nil {
		b.Fatalf("helper printed %q", out.String())
	}
	return wall, cpu
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// overhead alternates runs without and with recording and reports medians
// of wall and CPU time and of the per-pair ratios (recorded / plain).
func overhead(b *testing.B, mode, file string, n, rounds int, before func()) {
	var pw, rw, pc, rc, wr, cr []float64
	for i := 0; i < rounds; i++ {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		var w, c [2]float64
		for _, rec := range order {
			before()
			k := 0
			if rec {
				k = 1
			}
			w[k], c[k] = runHelper(b, mode, file, n, rec)
		}
		pw, rw, pc, rc = append(pw, w[0]), append(rw, w[1]), append(pc, c[0]), append(rc, c[1])
		wr, cr = append(wr, w[1]/w[0]), append(cr, c[1]/c[0])
	}
	b.ReportMetric(median(pw)/1e6, "plain-wall-ms")
	b.ReportMetric(median(rw)/1e6, "recorded-wall-ms")
	b.ReportMetric(median(wr), "wall-ratio")
	b.ReportMetric(wr[0], "wall-ratio-min")
	b.ReportMetric(wr[len(wr)-1], "wall-ratio-max")
	b.ReportMetric(median(pc)/1e6, "plain-cpu-ms")
	b.ReportMetric(median(rc)/1e6, "recorded-cpu-ms")
	b.ReportMetric(median(cr), "cpu-ratio")
}

// BenchmarkOverheadHotPread: 1 M preads of 4 KiB from a cached 64 MiB file
// (one get_pages event each), 9 alternating pairs. Run with -benchtime=1x.
func BenchmarkOverheadHotPread(b *testing.B) {
	requireRecorder(b, "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(b)
	p := tracetest.ColdFile(b, dir, 64<<20)
	warm, _ := os.ReadFile(p)
	_ = warm
	for range b.N {
		overhead(b, "pread", p, 1_000_000, 9, func() {})
	}
}

// BenchmarkOverheadColdScan: sequential 128 KiB reads of a 512 MiB file
// evicted (and verified cold with cachestat) before each run, 9
// alternating pairs. Run with -benchtime=1x.
func BenchmarkOverheadColdScan(b *testing.B) {
	requireRecorder(b, "filemap:mm_filemap_get_pages")
	dir := tracetest.DiskDir(b)
	p := tracetest.ColdFile(b, dir, 512<<20)
	for range b.N {
		overhead(b, "scan", p, 0, 9, func() { tracetest.Evict(b, p) })
	}
}
