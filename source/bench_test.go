package source

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
)

// bundleConsumer appends what it gets to a formats.Writer, as record does.
type bundleConsumer struct{ w *formats.Writer }

func (c bundleConsumer) Consume(b *Batch) error {
	for _, f := range b.Files {
		if err := c.w.AddFile(f); err != nil {
			return err
		}
	}
	for i := range b.Accesses {
		if err := c.w.Append(&b.Accesses[i]); err != nil {
			return err
		}
	}
	for i := range b.Hints {
		if err := c.w.AppendHint(&b.Hints[i]); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkTransport offers synthetic events (bench.bpf.c: 64 records per
// getppid(2) of a separate load process) at fixed rates for 3 s each and
// reports what reached a compressed bundle and what the ring dropped. It
// measures the ring-buffer transport, not the real tracing path
// (BenchmarkLatency and record's overhead benchmarks trace real programs).
// Run with -benchtime=1x.
func BenchmarkTransport(b *testing.B) {
	requireSource(b, "syscalls:sys_enter_getppid")
	for _, rate := range []float64{2e6, 4e6, 5e6, 6e6, 7e6, 8e6, 10e6, 0} {
		name := "max"
		if rate > 0 {
			name = fmt.Sprintf("offered=%gM", rate/1e6)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				benchTransport(b, rate)
			}
		})
	}
}

func benchTransport(b *testing.B, rate float64) {
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
	bench := &benchSource{perTrigger: per, cmd: load, done: make(chan struct{})}
	dir := tracetest.DiskDir(b)
	w, err := formats.Create(filepath.Join(dir, "bundle"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Abort()
	src, err := Open(Config{bench: bench, BTFCacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	if err := src.Start(bundleConsumer{w}); err != nil {
		b.Fatal(err)
	}
	<-bench.done
	src.Stop()
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	if err := src.Err(); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	st := src.Stats()
	offered := float64(bench.triggers.Load()) * per
	total := float64(st.Events + st.Dropped)
	b.ReportMetric(offered/dur.Seconds(), "offered/s")
	b.ReportMetric(float64(st.Events)/dur.Seconds(), "events/s")
	b.ReportMetric(100*float64(st.Dropped)/max(total, 1), "drop%")
	// Consumer CPU per delivered event (ring reader + decoder and bundle
	// writer threads): robust to other load on the machine.
	b.ReportMetric(float64(st.ReaderCPU+st.DecoderCPU)/max(float64(st.Events), 1), "consumer-ns/event")
	if fi, err := os.Stat(filepath.Join(dir, "bundle", "accesses.arrow")); err == nil {
		b.ReportMetric(float64(fi.Size())/max(float64(st.Events), 1), "bundleB/event")
	}
}

// BenchmarkHintSocket sends b.N tree_child_enter hints (path form, 4
// children) from 1 or 2 sender processes (Go client) and reports hints/s
// accepted by the source's hint server.
func BenchmarkHintSocket(b *testing.B) {
	for _, senders := range []int{1, 2} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) { benchHints(b, senders) })
	}
}

func benchHints(b *testing.B, senders int) {
	requireSource(b)
	dir := tracetest.DiskDir(b)
	data := filepath.Join(dir, "index.db")
	if err := os.WriteFile(data, make([]byte, 1<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "hints.sock")
	src, err := Open(Config{HintSocket: sock, BTFCacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	if err := src.Start(ConsumerFunc(func(*Batch) error { return nil })); err != nil {
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
	for src.Stats().Hints < uint64(b.N) {
		if time.Since(start) > time.Minute {
			b.Fatalf("only %d of %d hints accepted", src.Stats().Hints, b.N)
		}
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "hints/s")
	src.Stop()
	// CPU of the receiving thread per hint: robust to other load.
	b.ReportMetric(float64(src.Stats().HintCPU)/float64(b.N), "server-ns/hint")
}

// BenchmarkOpen opens a Source set up for a command (the record and run
// configuration: cgroup, the default 16 MiB ring), starts it, stops it and
// closes it, in this process, and reports the median time of each stage
// of Open (privileges, cgroup, probe, btf, load, targets, rings, attach),
// of Start, and of Stop and Close. The BTF cache is warm (its first build
// is not counted). Run with -benchtime=20x.
func BenchmarkOpen(b *testing.B) {
	requireSource(b, "filemap:mm_filemap_get_pages")
	cache := b.TempDir()
	if s, err := Open(Config{Command: true, BTFCacheDir: cache}); err == nil {
		s.Close()
	} else {
		b.Fatal(err)
	}
	phases := map[string][]float64{}
	add := func(name string, d time.Duration) {
		phases[name] = append(phases[name], float64(d.Microseconds())/1000)
	}
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		s, err := Open(Config{Command: true, BTFCacheDir: cache})
		if err != nil {
			b.Fatal(err)
		}
		add("open", time.Since(t0))
		for _, p := range s.Startup() {
			add(p.Name, p.Wall)
		}
		t1 := time.Now()
		if err := s.Start(ConsumerFunc(func(*Batch) error { return nil })); err != nil {
			b.Fatal(err)
		}
		add("start", time.Since(t1))
		t2 := time.Now()
		s.Stop()
		add("stop", time.Since(t2))
		t3 := time.Now()
		s.Close()
		add("close", time.Since(t3))
	}
	b.StopTimer()
	for name, v := range phases {
		slices.Sort(v)
		b.ReportMetric(v[len(v)/2], name+"-ms")
	}
}
