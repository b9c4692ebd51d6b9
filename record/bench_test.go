package record

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkTransport offers synthetic events (bench.bpf.c: 64 records per
// getppid(2) of a separate load process) at fixed rates for 3 s each and reports what reached the
// compressed bundle and what the ring dropped. Run with -benchtime=1x.
func BenchmarkTransport(b *testing.B) {
	requireRecorder(b, "syscalls:sys_enter_getppid")
	for _, rate := range []float64{2e6, 4e6, 5e6, 6e6, 7e6, 8e6, 10e6, 0} {
		name := "max"
		if rate > 0 {
			name = fmt.Sprintf("offered=%gM", rate/1e6)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				const per = 64
				dur := 3 * time.Second
				exe, err := os.Executable()
				if err != nil {
					b.Fatal(err)
				}
				load := exec.Command(exe)
				load.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER=getppid",
					fmt.Sprintf("PREDICTIO_RECORD_RATE=%g", rate/per), "PREDICTIO_RECORD_DURATION="+dur.String())
				load.Stderr = os.Stderr
				src := &benchSource{perTrigger: per, cmd: load}
				dir := diskDir(b)
				sum, err := Run(context.Background(), Config{Output: filepath.Join(dir, "bundle"), bench: src})
				if err != nil {
					b.Fatal(err)
				}
				if src.err != nil {
					b.Fatal(src.err)
				}
				offered := float64(src.triggers.Load()) * per
				total := float64(sum.Events + sum.Dropped)
				b.ReportMetric(offered/dur.Seconds(), "offered/s")
				b.ReportMetric(float64(sum.Events)/dur.Seconds(), "events/s")
				b.ReportMetric(100*float64(sum.Dropped)/max(total, 1), "drop%")
				// Consumer CPU per delivered event (ring reader + bundle
				// writer threads): robust to other load on the machine.
				b.ReportMetric(float64(sum.ReaderCPU+sum.WriterCPU)/max(float64(sum.Events), 1), "consumer-ns/event")
				st, _ := os.Stat(filepath.Join(dir, "bundle", "accesses.arrow"))
				if st != nil {
					b.ReportMetric(float64(st.Size())/max(float64(sum.Events), 1), "bundleB/event")
				}
			}
		})
	}
}

// BenchmarkHintSocket sends b.N tree_child_enter hints (path form, 4
// children) from 1 or 2 sender processes (Go client) and reports hints/s
// accepted by the recorder.
func BenchmarkHintSocket(b *testing.B) {
	for _, senders := range []int{1, 2} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) { benchHints(b, senders) })
	}
}

func benchHints(b *testing.B, senders int) {
	requireRecorder(b)
	dir := diskDir(b)
	data := filepath.Join(dir, "index.db")
	if err := os.WriteFile(data, make([]byte, 1<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "hints.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rch := make(chan *recorder, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Config{
			Output: filepath.Join(dir, "bundle"), Command: []string{"sleep", "3600"},
			HintSocket: sock, onStart: func(r *recorder) { rch <- r },
		})
		done <- err
	}()
	var r *recorder
	select {
	case r = <-rch:
	case err := <-done:
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var ins []io.WriteCloser
	var cmds []*exec.Cmd
	for s := range senders {
		n := b.N / senders
		if s == 0 {
			n += b.N % senders
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER=hints", "PREDICTIO_RECORD_SOCK="+sock,
			"PREDICTIO_RECORD_FILE="+data, "PREDICTIO_RECORD_N="+strconv.Itoa(n))
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		ready := make([]byte, 6)
		if _, err := io.ReadFull(out, ready); err != nil {
			b.Fatalf("hint sender: %v", err)
		}
		ins, cmds = append(ins, in), append(cmds, cmd)
	}
	b.ResetTimer()
	start := time.Now()
	for _, in := range ins {
		io.WriteString(in, "go\n")
		in.Close()
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			b.Fatalf("hint sender: %v", err)
		}
	}
	for r.hints.accepted.Load() < uint64(b.N) {
		if time.Since(start) > time.Minute {
			b.Fatalf("only %d of %d hints accepted", r.hints.accepted.Load(), b.N)
		}
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "hints/s")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	// CPU of the receiving thread per hint: robust to other load.
	b.ReportMetric(float64(r.hints.cpu.Load())/float64(b.N), "server-ns/hint")
}

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
			Output: filepath.Join(diskDir(b), "bundle"), Command: args, Stdout: &out, Stderr: os.Stderr,
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
	dir := diskDir(b)
	p := coldFile(b, dir, 64<<20)
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
	dir := diskDir(b)
	p := coldFile(b, dir, 512<<20)
	for range b.N {
		overhead(b, "scan", p, 0, 9, func() { evict(b, p) })
	}
}
