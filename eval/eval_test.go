package eval

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/predictio/predictio/internal/testenv"
)

// The quick suites run for real here (each in its reduced version, as CI
// runs them): they need root, a disk-backed scratch directory and, per
// suite, what --list says.

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the suites evict page caches and create cgroups")
	}
}

// quickRun runs suites in their quick versions into a fresh directory,
// evicting only the workloads' own files (other tests share the machine).
func quickRun(t *testing.T, o Options) (*Results, string) {
	t.Helper()
	needRoot(t)
	dir := testenv.ScratchDir(t, "eval-", "needs a disk-backed filesystem (not tmpfs): the suites measure the page cache and the disk")
	if o.Out == "" {
		o.Out = filepath.Join(dir, "out")
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(dir, "work")
	}
	o.Quick, o.EvictOnly = true, true
	var log bytes.Buffer
	o.Progress = &log
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("progress:\n%s", log.String())
		}
	})
	return res, o.Out
}

func metric(t *testing.T, p *Point, mode, key string) float64 {
	t.Helper()
	m := p.Mode(mode)
	if m == nil || m.Status != StatusOK {
		t.Fatalf("%s %s: mode %s did not run: %+v", p.Suite, p.ID, mode, m)
	}
	s, ok := m.Metrics[key]
	if !ok || s.N != m.Rounds || m.Rounds < 1 {
		t.Fatalf("%s %s %s: metric %s: %+v (rounds %d)", p.Suite, p.ID, mode, key, s, m.Rounds)
	}
	return s.Median
}

func point(t *testing.T, s *SuiteResult, id string) *Point {
	t.Helper()
	for _, p := range s.Points {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("suite %s has no point %s", s.Name, id)
	return nil
}

// TestQuickReadahead runs the readahead suite: readahead must cover a
// sequential stream and not single-page jumps, live and simulated, every
// live run verified cold; the report, plots and results must be written,
// and a rerun must skip every finished point.
func TestQuickReadahead(t *testing.T) {
	res, out := quickRun(t, Options{Suites: []string{"readahead"}, NoDeviceCheck: true})
	s := res.Suite("readahead")
	if s == nil || s.Status != StatusOK {
		t.Fatalf("readahead suite: %+v", s)
	}
	for _, where := range []string{"live", "simulate"} {
		seq := metric(t, point(t, s, where+"/run=seq"), "readahead", "coverage")
		one := metric(t, point(t, s, where+"/run=1"), "readahead", "coverage")
		if seq < 0.9 || one > 0.2 {
			t.Errorf("%s coverage: seq %.3f (want >= 0.9), run=1 %.3f (want <= 0.2)", where, seq, one)
		}
	}
	for _, p := range s.Points {
		if strings.HasPrefix(p.ID, "live/") && (!p.ColdVerified || p.Rounds != DefaultQuickRounds) {
			t.Errorf("%s: cold_verified %v (%s), rounds %d", p.ID, p.ColdVerified, p.Cold, p.Rounds)
		}
		if p.Kernel == "" || p.DevicePreset != "this" || p.FinishedAt.IsZero() {
			t.Errorf("%s: provenance missing: %+v", p.ID, p)
		}
	}
	for _, f := range []string{"results.json", "report.md", "report.html", "plots/readahead-coverage.png", "plots/readahead-coverage.svg", "plots/readahead-p95.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	html, _ := os.ReadFile(filepath.Join(out, "report.html"))
	if !bytes.Contains(html, []byte("<svg")) || bytes.Contains(html, []byte("<img")) {
		t.Error("report.html does not inline its plots as SVG")
	}
	md, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !bytes.Contains(md, []byte("Paper, figure 2")) || !bytes.Contains(md, []byte("adds no latency at queue depth 1")) {
		t.Error("report.md lacks the paper's figure or the throttling note")
	}

	// A rerun resumes: every point is taken from results.json.
	prev := map[string]string{}
	for _, p := range s.Points {
		prev[p.ID] = p.FinishedAt.String()
	}
	res2, err := Run(context.Background(), Options{Suites: []string{"readahead"}, Quick: true, EvictOnly: true, NoDeviceCheck: true,
		Out: out, WorkDir: filepath.Join(filepath.Dir(out), "work")})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res2.Suite("readahead").Points {
		if prev[p.ID] != p.FinishedAt.String() {
			t.Errorf("rerun measured %s again", p.ID)
		}
	}
	// A directory of another device preset is refused.
	if _, err := Run(context.Background(), Options{Suites: []string{"readahead"}, Quick: true, Device: "hdd", Out: out}); err == nil || !strings.Contains(err.Error(), "holds results for device this") {
		t.Errorf("mixing presets in one directory: %v", err)
	}
}

// TestQuickControl runs the control suite: predictio's own benchmarks,
// built from this tree.
func TestQuickControl(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
			t.Skip("needs the Go toolchain to build the benchmarks")
		}
	}
	res, _ := quickRun(t, Options{Suites: []string{"control"}, NoDeviceCheck: true})
	s := res.Suite("control")
	if ev := metric(t, point(t, s, "event-path/offered=2M"), "predictio", "events_per_s"); ev < 1e5 {
		t.Errorf("event path delivered %.0f events/s at 2 M/s offered", ev)
	}
	if h := metric(t, point(t, s, "hint-socket/senders=1"), "predictio", "hints_per_s"); h <= 0 {
		t.Errorf("hint socket: %v hints/s", h)
	}
	p := point(t, s, "hint-size/bytes=4096")
	if b := metric(t, p, "predictio", "message_bytes"); b < 3500 || b > 4096 {
		t.Errorf("hint-size/bytes=4096 sent %v-byte messages", b)
	}
	if h := metric(t, p, "predictio", "hints_per_s"); h <= 0 {
		t.Errorf("hint-size/bytes=4096: %v hints/s", h)
	}
	for _, id := range []string{"dispatch/policies=5/work", "dispatch/policies=5/fast-exits", "dispatch/policies=1/tree"} {
		if v := metric(t, point(t, s, id), "predictio", "Mevents_per_s"); v <= 0 {
			t.Errorf("%s: %v M events/s", id, v)
		}
	}
	for _, p := range s.Points {
		if p.ColdVerified || (p.Status != StatusNotRun && !strings.HasPrefix(p.Cold, "not applicable")) {
			t.Errorf("%s: a microbenchmark claims a cold run: %q", p.ID, p.Cold)
		}
		if p.Status == StatusNotRun && !strings.Contains(p.Reason, "needs") && !strings.Contains(p.Reason, "no Benchmark") {
			t.Errorf("%s: not run without saying what it needs: %q", p.ID, p.Reason)
		}
	}
}

var (
	buildOnce sync.Once
	binPath   string
	binErr    error
)

// predictioBinary builds cmd/predictio once, for the suites that call it
// (predictio run, where this build has it).
func predictioBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root := findModuleRoot()
		dir, err := os.MkdirTemp("", "eval-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "predictio")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/predictio")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			binErr = err
			t.Logf("%s", b)
		}
	})
	if binErr != nil {
		t.Skipf("cannot build predictio: %v", binErr)
	}
	return binPath
}

// TestQuickMigrate runs the migrate suite on a small DB: baseline and
// native-off are measured cold; noop and predictio run through predictio
// run where this build has it, and say so where it has not.
func TestQuickMigrate(t *testing.T) {
	if _, err := exec.LookPath("db_bench"); err != nil {
		t.Skip("needs db_bench from Debian's rocksdb-tools (scripts/setup.sh)")
	}
	bin := predictioBinary(t)
	res, _ := quickRun(t, Options{Suites: []string{"migrate"}, NoDeviceCheck: true, Predictio: bin})
	s := res.Suite("migrate")
	lr := probeRun(context.Background(), bin)
	for _, id := range []string{"scan", "ycsb-e", "ycsb-c"} {
		p := point(t, s, id)
		if !p.ColdVerified {
			t.Errorf("%s: %s", id, p.Cold)
		}
		for _, m := range []string{"baseline", "native-off"} {
			if w := metric(t, p, m, "wall_s"); w <= 0 {
				t.Errorf("%s %s: wall %v", id, m, w)
			}
			metric(t, p, m, "micros_per_op")
		}
		for _, m := range []string{"noop", "predictio"} {
			mr := p.Mode(m)
			if lr.missing != "" && (mr.Status != StatusNotRun || !strings.Contains(mr.Reason, "predictio run")) {
				t.Errorf("%s %s: %s %q, want not run for want of predictio run", id, m, mr.Status, mr.Reason)
			}
			if lr.missing == "" && m == "predictio" {
				metric(t, p, m, "wall_s")
			}
		}
	}
}

// TestQuickLaunch runs the launch suite's quick programs (python3, node)
// cold, with the files predictio record found for the cold check.
func TestQuickLaunch(t *testing.T) {
	for _, p := range []string{"node"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("needs %s", p)
		}
	}
	res, _ := quickRun(t, Options{Suites: []string{"launch"}, NoDeviceCheck: true, Predictio: predictioBinary(t)})
	s := res.Suite("launch")
	for _, id := range []string{"python3", "node"} {
		p := point(t, s, id)
		if w := metric(t, p, "baseline", "wall_s"); w <= 0 {
			t.Errorf("%s: wall %v", id, w)
		}
		c := p.Mode("baseline").Cold
		if c == nil || c.Files < 3 {
			t.Errorf("%s: the cold check covers %+v; want the files the launch touched", id, c)
		}
		// What stays cached is what other processes map (libc, ld.so).
		if !p.ColdVerified {
			t.Errorf("%s: not verified cold: %s", id, p.Cold)
		}
	}
	if i := slices.IndexFunc(s.Notes, func(n string) bool { return strings.Contains(n, "a cold `predictio version` took") }); i < 0 {
		t.Errorf("the suite's notes do not say what predictio's own cold start reads: %q", s.Notes)
	} else {
		t.Log(s.Notes[i])
	}
	// The daemon, running when python3 starts, read the launch's pages
	// ahead of it.
	p := point(t, s, "python3")
	metric(t, p, "daemon", "wall_s")
	r := metric(t, p, "daemon", "daemon_read_pages")
	t.Logf("python3: baseline %.3f s, daemon %.3f s, the daemon read %.0f pages; %s", metric(t, p, "baseline", "wall_s"), metric(t, p, "daemon", "wall_s"), r, p.Cold)
	if r < 100 {
		t.Errorf("python3 with the daemon: the daemon read %v pages per launch; want the launch's profile read ahead", r)
	}
}

// TestQuickDevices runs the devices suite's launch part under this and
// the sata-ssd throttle, each preset measured with bench device.
func TestQuickDevices(t *testing.T) {
	res, _ := quickRun(t, Options{Suites: []string{"devices"}, Predictio: predictioBinary(t)})
	s := res.Suite("devices")
	for _, d := range []string{"this", "sata-ssd"} {
		p := point(t, s, "launch-python3/"+d)
		if p.DevicePreset != d {
			t.Errorf("%s ran under %s", p.ID, p.DevicePreset)
		}
		metric(t, p, "baseline", "wall_s")
		sq := point(t, s, "sqlite-2^14/"+d)
		if metric(t, sq, "baseline", "rows") != 1<<10 || sq.DevicePreset != d {
			t.Errorf("%s: %+v", sq.ID, sq)
		}
		// The daemon, learned from scans of other keys, runs the scan.
		if metric(t, sq, "daemon", "rows") != 1<<10 || metric(t, sq, "daemon", "daemon_read_pages") < 100 {
			t.Errorf("%s: the daemon read %v pages", sq.ID, metric(t, sq, "daemon", "daemon_read_pages"))
		}
	}
	if len(res.OtherDevices) != 1 || res.OtherDevices[0].Preset.Name != "sata-ssd" || res.OtherDevices[0].Check == nil ||
		!strings.Contains(res.OtherDevices[0].Throttle, "cgroup") {
		t.Fatalf("other devices: %+v", res.OtherDevices)
	}
	if res.Device.Check == nil {
		t.Errorf("the run's own preset was not measured: %s", res.Device.CheckNote)
	}
}

// TestDeviceCheckHDD measures the HDD preset (343 IOPS) as a run on it
// does, quick: the check ends within 3 minutes (before the host phase was
// sized to the device it read 245 K pages at 343 IOPS, 12 minutes),
// respects the preset's limits, and its host costs were measured first,
// without the throttle.
func TestDeviceCheckHDD(t *testing.T) {
	needRoot(t)
	dir := testenv.ScratchDir(t, "eval-", "needs a disk-backed filesystem (not tmpfs): the check throttles the disk")
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	x, err := newRunner(ctx, Options{Device: "hdd", Quick: true, EvictOnly: true,
		Out: filepath.Join(dir, "out"), WorkDir: filepath.Join(dir, "work"), Progress: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	d := x.res.Device
	if d.Check == nil || d.Profile == nil || d.Profile.Host == nil {
		t.Fatalf("no check: %s\n%s", d.CheckNote, log.String())
	}
	if !d.Check.WithinLimits || d.Check.RandReadIOPS > 1.1*343 || d.Check.RandReadIOPS < 100 {
		t.Errorf("check %+v against %+v", *d.Check, d.Preset)
	}
	if h := d.Profile.Host; len(h.Prefetch) != 4 || h.ColdReadDirectNS == 0 || h.CachedReadNS == 0 {
		t.Errorf("host costs %+v", *h)
	}
	l := log.String()
	if i, j := strings.Index(l, "host's costs without a throttle"), strings.Index(l, "eval: device hdd: QD1"); i < 0 || j < i {
		t.Errorf("the host's costs were not measured before the throttled check:\n%s", l)
	}
}

// TestQuickSQLite runs both panels' quick scans: Baseline measured cold,
// every scan's row count checked; the predictio modes run through
// predictio run where the build has it and say so where not.
func TestQuickSQLite(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("needs the sqlite3 CLI")
	}
	bin := predictioBinary(t)
	res, _ := quickRun(t, Options{Suites: []string{"sqlite"}, NoDeviceCheck: true, Predictio: bin})
	s := res.Suite("sqlite")
	lr := probeRun(context.Background(), bin)
	for _, id := range []string{"kv/rows=4096", "kv/rows=16384", "ycsb/rows=256", "ycsb/rows=1024"} {
		p := point(t, s, id)
		if !p.ColdVerified {
			t.Errorf("%s: %s", id, p.Cold)
		}
		metric(t, p, "baseline", "rows")
		if m := p.Mode("tree"); lr.missing != "" && (m.Status != StatusNotRun || !strings.Contains(m.Reason, "predictio run")) {
			t.Errorf("%s tree: %s %q", id, m.Status, m.Reason)
		}
	}
}

// TestQuickReuse runs one tree policy's stores: SQLite and LMDB (with and
// without MDB_NORDAHEAD), their Baselines measured cold.
func TestQuickReuse(t *testing.T) {
	for _, b := range []string{"sqlite3", "mdb_load", "cc"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s", b)
		}
	}
	res, _ := quickRun(t, Options{Suites: []string{"reuse"}, NoDeviceCheck: true, Predictio: predictioBinary(t)})
	s := res.Suite("reuse")
	if s.Status == StatusNotRun && strings.Contains(s.Reason, "liblmdb") {
		t.Skip(s.Reason)
	}
	for _, id := range []string{"sqlite", "lmdb-nordahead", "lmdb"} {
		p := point(t, s, id)
		if !p.ColdVerified {
			t.Errorf("%s: %s", id, p.Cold)
		}
		metric(t, p, "baseline", "wall_s")
	}
	if n := metric(t, point(t, s, "lmdb"), "baseline", "keys"); n != 1<<10 {
		t.Errorf("lmdb scan read %v keys", n)
	}
}

// TestQuickLLM loads the small generated model with llama.cpp, cold,
// without mmap.
func TestQuickLLM(t *testing.T) {
	if _, err := os.Stat(filepath.Join(llmDir(), "node_modules", "node-llama-cpp")); err != nil {
		t.Skipf("needs node-llama-cpp in %s (scripts/setup.sh installs it)", llmDir())
	}
	res, _ := quickRun(t, Options{Suites: []string{"llm"}, NoDeviceCheck: true, Predictio: predictioBinary(t)})
	p := point(t, res.Suite("llm"), "small-q8/no-mmap")
	if !p.ColdVerified {
		t.Errorf("%s", p.Cold)
	}
	if l := metric(t, p, "baseline", "load_ms"); l <= 0 {
		t.Errorf("load_ms %v", l)
	}
	if f := metric(t, p, "baseline", "first_token_ms"); f < metric(t, p, "baseline", "load_ms") {
		t.Errorf("first token before the load ended")
	}
}

// TestExpectedScalesWithRounds checks that --list and the ETA scale a
// suite's expected time (measured at the default rounds) by --rounds.
func TestExpectedScalesWithRounds(t *testing.T) {
	p, _ := presetForTest("this")
	info := Suites()[0].Info()
	def := expected(info, false, p, 0)
	if def <= 0 {
		t.Fatalf("%s: expected time %v", info.Name, def)
	}
	if got := expected(info, false, p, DefaultRounds); got != def {
		t.Errorf("at the default rounds: %v, want %v", got, def)
	}
	if got, want := expected(info, false, p, 2*DefaultRounds), 2*def; got != want {
		t.Errorf("at %d rounds: %v, want %v", 2*DefaultRounds, got, want)
	}
	q := expected(info, true, p, 0)
	if got, want := expected(info, true, p, 2*DefaultQuickRounds), 2*q; got != want {
		t.Errorf("quick at %d rounds: %v, want %v", 2*DefaultQuickRounds, got, want)
	}
	var b5, b10 bytes.Buffer
	List(&b5, false, p, 0)
	List(&b10, false, p, 2*DefaultRounds)
	if b5.String() == b10.String() {
		t.Errorf("--list prints the same expected times at %d rounds as at the default", 2*DefaultRounds)
	}
}

func TestListAndSelect(t *testing.T) {
	var b bytes.Buffer
	p, _ := presetForTest("hdd")
	List(&b, false, p, 0)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != len(Suites())+1 {
		t.Fatalf("--list printed %d lines for %d suites:\n%s", len(lines), len(Suites()), b.String())
	}
	for i, s := range Suites() {
		l := lines[i]
		if !strings.HasPrefix(l, s.Info().Name+"\t") || !strings.Contains(l, "needs: ") || !strings.Contains(l, "expected: ") {
			t.Errorf("line %q lacks name, needs or expected time", l)
		}
	}
	if !strings.Contains(lines[len(lines)-1], "h") {
		t.Errorf("all suites on the hdd preset are expected to take hours: %q", lines[len(lines)-1])
	}
	if _, err := Select([]string{"readahead,nope"}); err == nil || !strings.Contains(err.Error(), "readahead, control") {
		t.Errorf("Select of an unknown suite: %v", err)
	}
	all, _ := Select([]string{"all", "control"})
	if len(all) != len(Suites()) {
		t.Errorf("all + control selected %d suites", len(all))
	}
}
