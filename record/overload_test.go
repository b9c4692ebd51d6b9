package record_test

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

var (
	overloadDuration  = flag.Duration("overload.duration", 5*time.Second, "BenchmarkOverload: length of each run's load phase")
	overloadHintRate  = flag.Float64("overload.hint-rate", 0, "BenchmarkOverload: hints/s offered; 0: twice the capacity it measures first")
	overloadEventRate = flag.Float64("overload.event-rate", 0, "BenchmarkOverload: page events/s offered; 0: twice the real path's capacity it measures first")
	overloadThreads   = flag.Int("overload.threads", 2, "BenchmarkOverload: pread threads offering the events")
)

// BenchmarkOverload offers hints and page events to `predictio record` at
// twice the capacity it measures first on this machine (issue 17,
// "Overload, measured"), and reports what the traced program and the
// recorder get:
//
//  1. hint capacity: one thread resends each hint until the recorder takes
//     it (waiting in poll while its queue is full): hints/s accepted;
//  2. real-path event capacity: one thread preads cached 4 KiB pages back to
//     back under the recorder: read events/s;
//  3. the same program offering 2× both (events from -overload.threads
//     threads, hints from one), with no recorder at all (hints go nowhere);
//  4. the same under the recorder.
//
// Reported: the offered rates, the drop shares, slowdown (run 4's load
// phase / run 3's, the program's fixed work at a fixed pace), the
// recorder's peak RSS and its growth from the first to the second half of
// the run; and it fails unless drops are counted exactly: hints sent =
// received by the recorder + dropped (the recorder learns the drops from
// the clients' reports), and read events = rows + dropped events. The
// traced program is testdata/overload.c (a static C program using
// hints/predictio_hints.h, its pages locked before the load starts so that
// its only file events are the preads). Needs root (CAP_BPF, CAP_PERFMON),
// gcc and the go tool.
//
//	go test -run '^$' -bench Overload -benchtime 1x ./record
func BenchmarkOverload(b *testing.B) {
	env := newOverloadEnv(b)
	for range b.N {
		hintCap := env.run(b, "hint capacity", true, -1, 0, 1)
		eventCap := env.run(b, "event capacity", true, 0, -1, 1)
		hcap := float64(hintCap.load.sent) / hintCap.phase().Seconds()
		ecap := float64(eventCap.load.preads) / eventCap.phase().Seconds()
		hr, er := *overloadHintRate, *overloadEventRate
		if hr == 0 {
			hr = 2 * hcap
		}
		if er == 0 {
			er = 2 * ecap
		}
		plain := env.run(b, "plain", false, hr, er, *overloadThreads)
		over := env.run(b, "overload", true, hr, er, *overloadThreads)
		over.check(b)

		l, s := over.load, over.phase().Seconds()
		b.Logf("capacity: %.0f hints/s, %.0f read events/s (one thread, recorded)", hcap, ecap)
		b.Logf("asked: %.0f hints/s, %.0f events/s; offered: %.0f hints/s, %.0f events/s over %v (plain: %v)",
			hr, er, float64(l.hints)/s, float64(l.preads)/s, over.phase().Round(time.Millisecond), plain.phase().Round(time.Millisecond))
		b.Logf("hints: %d sent, %d queued, %d dropped (%d queue full, %d no recorder), recorder: %d accepted + %d rejected + %d reported dropped",
			l.hints, l.sent, l.queueFull+l.noServer, l.queueFull, l.noServer, over.counters.Hints, over.counters.RejectedHints, over.counters.DroppedHints)
		b.Logf("events: %d preads, %d read rows, %d dropped; recorder RSS peak %.1f MiB (first half %.1f, second half %.1f)",
			l.preads, over.readRows, over.counters.DroppedEvents, mib(over.rssPeak), mib(over.rssFirst), mib(over.rssSecond))
		b.ReportMetric(hcap, "hint-capacity/s")
		b.ReportMetric(ecap, "event-capacity/s")
		b.ReportMetric(float64(l.hints)/s, "offered-hints/s")
		b.ReportMetric(float64(l.preads)/s, "offered-events/s")
		b.ReportMetric(100*float64(l.queueFull+l.noServer)/float64(max(l.hints, 1)), "hints-dropped-%")
		b.ReportMetric(100*float64(over.counters.DroppedEvents)/float64(max(l.preads, 1)), "events-dropped-%")
		b.ReportMetric(over.phase().Seconds()/plain.phase().Seconds(), "slowdown")
		b.ReportMetric(float64(over.load.cpuNS)/float64(max(plain.load.cpuNS, 1)), "cpu-ratio")
		b.ReportMetric(mib(over.rssPeak), "rss-peak-MiB")
		b.ReportMetric(mib(over.rssSecond)-mib(over.rssFirst), "rss-growth-MiB")
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

type overloadEnv struct {
	dir, data, predictio, load string
	runs                       int
}

// newOverloadEnv builds predictio and the load program and writes a
// 64 MiB data file.
func newOverloadEnv(b *testing.B) *overloadEnv {
	tl := buildTools(b)
	e := &overloadEnv{dir: tl.dir, data: filepath.Join(tl.dir, "data", "file"),
		predictio: tl.predictio, load: tl.cprog(b, "overload")}
	if err := os.Mkdir(filepath.Dir(e.data), 0o755); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	if err := os.WriteFile(e.data, buf, 0o644); err != nil {
		b.Fatal(err)
	}
	return e
}

// loadResult is what the load program printed.
type loadResult struct {
	phaseNS, cpuNS                                     int64
	preads, hints, sent, queueFull, noServer, reported uint64
}

// counters are the manifest counters the benchmark checks.
type counters struct {
	Hints         uint64 `json:"hints"`
	RejectedHints uint64 `json:"rejected_hints"`
	DroppedHints  uint64 `json:"dropped_hints"`
	Events        uint64 `json:"events"`
	DroppedEvents uint64 `json:"dropped_events"`
}

type overloadRun struct {
	name                         string
	recorded                     bool
	load                         loadResult
	counters                     counters
	readRows                     uint64 // read rows of the data file
	rssPeak, rssFirst, rssSecond uint64 // recorder RSS: peak, peak in each half of the load phase
}

func (r *overloadRun) phase() time.Duration { return time.Duration(r.load.phaseNS) }

// run runs the load program, under `predictio record` when recorded.
func (e *overloadEnv) run(b *testing.B, name string, recorded bool, hintRate, eventRate float64, threads int) *overloadRun {
	b.Helper()
	e.runs++
	sock := filepath.Join(e.dir, fmt.Sprintf("hints-%d.sock", e.runs))
	bundle := filepath.Join(e.dir, fmt.Sprintf("bundle-%d", e.runs))
	args := []string{e.load, e.data, sock, strconv.FormatFloat(hintRate, 'f', 0, 64),
		strconv.FormatFloat(eventRate, 'f', 0, 64), strconv.Itoa(threads), strconv.FormatInt(overloadDuration.Milliseconds(), 10)}
	var cmd *exec.Cmd
	if recorded {
		cmd = exec.Command(e.predictio, append([]string{"record", "-quiet", "-o", bundle,
			"--hints", "unix:" + sock, "--include", filepath.Dir(e.data), "--"}, args...)...)
	} else {
		cmd = exec.Command(args[0], args[1:]...)
	}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if l := <-lines; l != "ready" {
		b.Fatalf("%s: load program said %q", name, l)
	}
	if recorded {
		waitFor(b, name, sock)
	}
	r := &overloadRun{name: name, recorded: recorded}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var samples []rssSample
	if recorded {
		wg.Add(1)
		go func() { defer wg.Done(); samples = sampleRSS(cmd.Process.Pid, stop) }()
	}
	start := time.Now()
	io.WriteString(in, "go\n")
	l, ok := <-lines
	close(stop)
	wg.Wait()
	if err := cmd.Wait(); err != nil || !ok {
		b.Fatalf("%s: %v (output %q)", name, err, l)
	}
	if _, err := fmt.Sscanf(l, "phase_ns=%d cpu_ns=%d preads=%d hints=%d sent=%d queue_full=%d no_server=%d reported=%d",
		&r.load.phaseNS, &r.load.cpuNS, &r.load.preads, &r.load.hints, &r.load.sent, &r.load.queueFull,
		&r.load.noServer, &r.load.reported); err != nil {
		b.Fatalf("%s: load program printed %q: %v", name, l, err)
	}
	if recorded {
		r.rssPeak, r.rssFirst, r.rssSecond = rssHalves(samples, start, r.phase())
		r.readBundle(b, bundle, e.data)
	}
	return r
}

// waitFor waits for the recorder's hint socket.
func waitFor(b *testing.B, name, sock string) {
	for range 1000 {
		if _, err := os.Stat(sock); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s: hint socket %s never appeared", name, sock)
}

type rssSample struct {
	at  time.Time
	rss uint64
}

// sampleRSS reads VmRSS of pid every 20 ms until stop.
func sampleRSS(pid int, stop chan struct{}) []rssSample {
	var s []rssSample
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
					s = append(s, rssSample{time.Now(), kb << 10})
				}
			}
		}
		select {
		case <-stop:
			return s
		case <-t.C:
		}
	}
}

// rssHalves returns the peak RSS and the peaks of the first and second
// half of the load phase.
func rssHalves(s []rssSample, start time.Time, phase time.Duration) (peak, first, second uint64) {
	mid := start.Add(phase / 2)
	for _, x := range s {
		peak = max(peak, x.rss)
		switch {
		case x.at.Before(start):
		case x.at.Before(mid):
			first = max(first, x.rss)
		default:
			second = max(second, x.rss)
		}
	}
	return peak, first, second
}

// readBundle reads the manifest counters and counts the data file's read
// rows.
func (r *overloadRun) readBundle(b *testing.B, dir, data string) {
	r.counters, _ = manifestCounters(b, dir)
	bd, err := formats.Open(dir)
	if err != nil {
		b.Fatalf("%s: %v", r.name, err)
	}
	defer bd.Close()
	files, err := bd.Files()
	if err != nil {
		b.Fatalf("%s: %v", r.name, err)
	}
	id := ^uint32(0)
	for _, f := range files {
		if f.Path == data {
			id = f.ID
		}
	}
	c, err := bd.Accesses()
	if err != nil {
		b.Fatalf("%s: %v", r.name, err)
	}
	defer c.Close()
	for c.Next() {
		if a := c.At(); a.FileID == id && a.Kind == formats.KindRead {
			r.readRows++
		}
	}
	if err := c.Err(); err != nil {
		b.Fatalf("%s: read accesses: %v", r.name, err)
	}
}

// check fails the benchmark unless every hint and every read event is
// accounted for exactly.
func (r *overloadRun) check(b *testing.B) {
	l, c := r.load, r.counters
	if l.hints != l.sent+l.queueFull+l.noServer {
		b.Errorf("%s: client: %d hints ≠ %d queued + %d + %d dropped", r.name, l.hints, l.sent, l.queueFull, l.noServer)
	}
	if c.Hints+c.RejectedHints != l.sent {
		b.Errorf("%s: recorder received %d + %d rejected hints, the client queued %d", r.name, c.Hints, c.RejectedHints, l.sent)
	}
	if c.DroppedHints != l.queueFull+l.noServer {
		b.Errorf("%s: recorder learned of %d dropped hints, the client dropped %d (reported %d)",
			r.name, c.DroppedHints, l.queueFull+l.noServer, l.reported)
	}
	if r.readRows+c.DroppedEvents != l.preads {
		b.Errorf("%s: %d read rows + %d dropped events ≠ %d preads", r.name, r.readRows, c.DroppedEvents, l.preads)
	}
}
