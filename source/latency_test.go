package source

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/predictio/predictio/internal/tracetest"
)

// latencyHist counts delivery latencies in 1 µs buckets up to 1 s.
type latencyHist struct {
	n   [1_000_000]uint64
	big uint64 // over 1 s
	all uint64
	max uint64
}

func (h *latencyHist) add(ns uint64) {
	us := ns / 1000
	h.all++
	h.max = max(h.max, us)
	if us >= uint64(len(h.n)) {
		h.big++
		return
	}
	h.n[us]++
}

// quantile returns the q-quantile in µs (the upper bound of its bucket).
func (h *latencyHist) quantile(q float64) float64 {
	want := uint64(q * float64(h.all))
	var sum uint64
	for i, c := range h.n {
		sum += c
		if sum > want {
			return float64(i + 1)
		}
	}
	return float64(h.max)
}

// BenchmarkLatency measures the time from an event in the kernel (its
// last kernel timestamp: a pread's exit, where its row is written) to the
// consumer's Consume call receiving it, for a real
// program: a helper that preads 4 KiB of a cached file, at a paced rate or
// flat out, traced as a command. Loads:
//
//	sparse   1 thread, 1 000 reads/s: every event finds the reader asleep
//	paced    1 thread, 50 000 reads/s
//	busy     paced, with two untraced CPU-bound processes on the 2 vCPUs
//	flood    2 threads as fast as they can (the traced program saturates the CPUs)
//
// for the LowLatency mode (the live runtime's) and, for comparison, the
// Batched mode (the recorder's). It reports the p50, p99 and p99.9
// latency in µs, the maximum, the delivered events/s, the ring's drops,
// and the traced program's reads/s. Run with -benchtime=1x; each point
// lasts 3 s.
func BenchmarkLatency(b *testing.B) {
	requireSource(b, "filemap:mm_filemap_get_pages")
	file := tracetest.WarmFile(b, tracetest.DiskDir(b), 16<<20)
	loads := []struct {
		name    string
		rate    float64
		threads int
		hogs    int
	}{
		{"sparse", 1000, 1, 0},
		{"paced", 50000, 1, 0},
		{"busy", 50000, 1, 2},
		{"flood", 0, 2, 0},
	}
	for _, mode := range []Latency{LowLatency, Batched} {
		name := map[Latency]string{LowLatency: "low", Batched: "batched"}[mode]
		for _, l := range loads {
			b.Run(fmt.Sprintf("mode=%s/load=%s", name, l.name), func(b *testing.B) {
				for range b.N {
					benchLatency(b, mode, file, l.rate, l.threads, l.hogs)
				}
			})
		}
	}
}

func benchLatency(b *testing.B, mode Latency, file string, rate float64, threads, hogs int) {
	const dur = 3 * time.Second
	h := new(latencyHist)
	src, err := Open(Config{Command: true, Latency: mode, BTFCacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	if err := src.Start(ConsumerFunc(func(bt *Batch) error {
		now := monoNow()
		for i := range bt.Accesses {
			// A row exists from its last kernel event: a system call's
			// exit (EndNS; TS is its entry), else its own time.
			a := &bt.Accesses[i]
			ts := a.TS
			if a.EndNS != 0 {
				ts = a.EndNS
			}
			if now > ts {
				h.add(now - ts)
			}
		}
		return nil
	})); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER=preadpaced", "PREDICTIO_RECORD_FILE="+file,
		"PREDICTIO_RECORD_RATE="+strconv.FormatFloat(rate, 'f', -1, 64), "PREDICTIO_RECORD_DURATION="+dur.String(),
		"PREDICTIO_RECORD_THREADS="+strconv.Itoa(threads))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := src.StartCommand(cmd); err != nil {
		b.Fatal(err)
	}
	rd := bufio.NewReader(out)
	if line, err := rd.ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("helper: %q, %v", line, err)
	}
	var hogCmds []*exec.Cmd
	for range hogs {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			b.Fatal(err)
		}
		hogCmds = append(hogCmds, hog)
	}
	defer func() {
		for _, hog := range hogCmds {
			hog.Process.Kill()
			hog.Wait()
		}
	}()
	// Only the paced part counts: drop what the helper's start-up made.
	time.Sleep(100 * time.Millisecond)
	before := src.Stats()
	*h = latencyHist{}
	fmt.Fprintln(in, "go")
	line, _ := rd.ReadString('\n')
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	src.Stop()
	reads, _ := strconv.ParseFloat(strings.TrimSpace(line), 64)
	st := src.Stats()
	b.ReportMetric(h.quantile(0.50), "p50-µs")
	b.ReportMetric(h.quantile(0.99), "p99-µs")
	b.ReportMetric(h.quantile(0.999), "p99.9-µs")
	b.ReportMetric(float64(h.max), "max-µs")
	b.ReportMetric(float64(h.all)/dur.Seconds(), "events/s")
	b.ReportMetric(float64(st.Dropped-before.Dropped), "dropped")
	b.ReportMetric(reads/dur.Seconds(), "reads/s")
}
