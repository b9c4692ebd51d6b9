package live

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/replay"
	"github.com/predictio/predictio/simulate"
)

func runOnce(t *testing.T, cfg RunConfig) (*RunResult, string, string) {
	t.Helper()
	var out, warn bytes.Buffer
	cfg.Stdout, cfg.Warn = &out, &warn
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v (warnings: %s)", err, warn.String())
	}
	return res, out.String(), warn.String()
}

// TestRunLearnsAndPrefetches runs a program twice with a profile: the
// first run learns the files it reads; in the second the launch policy
// has them cached before the program reads a byte, and a noop run
// (backend none) of the same profile does not. It fails if the launch
// prefetch, the learning or the profile's persistence is broken.
func TestRunLearnsAndPrefetches(t *testing.T) {
	requireSource(t)
	files := testFiles(t, 3, 512<<10)
	prof := filepath.Join(t.TempDir(), "profiles")
	self, _ := os.Executable()

	helperEnv(t, "read", files)
	res, _, warn := runOnce(t, RunConfig{Command: []string{self}, Profile: prof})
	if !res.Traced || !res.Learned || warn != "" {
		t.Fatalf("first run: traced %v learned %v, warnings %q", res.Traced, res.Learned, warn)
	}
	st, err := os.Stat(prof)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("profile directory %v, err %v: want mode 0700", st.Mode(), err)
	}
	fst, err := os.Stat(res.ProfileFile)
	if err != nil || fst.Mode().Perm() != 0o600 {
		t.Fatalf("profile file %s: %v %v, want mode 0600", res.ProfileFile, fst.Mode(), err)
	}
	p, err := LoadProfile(prof, res.Program)
	if err != nil || p == nil {
		t.Fatalf("load profile: %v", err)
	}
	plan := p.Plan()
	for _, f := range files {
		i := slices.IndexFunc(plan, func(s policies.LaunchStep) bool { return s.File.Path == f })
		if i < 0 {
			t.Fatalf("profile lacks %s", f)
		}
		if n := rangesPages(plan[i].Ranges); n != 128 {
			t.Errorf("profile has %d pages of %s, want 128", n, f)
		}
	}

	helperEnv(t, "probe", files, "PREDICTIO_LIVE_WAIT_MS", "300")
	probe := func(backend string) []uint64 {
		evict(t, files)
		res, out, warn := runOnce(t, RunConfig{Command: []string{self}, Profile: prof, Backend: backend})
		if warn != "" || res.ExitCode != 0 {
			t.Fatalf("run: exit %d, warnings %q", res.ExitCode, warn)
		}
		c, _ := probed(t, out)
		return c
	}
	// Another test's drop_caches may evict the prefetched pages before
	// the probe: a few tries.
	var got []uint64
	runs := 1
	for range 3 {
		runs++
		if got = probe("kernel"); slices.Min(got) >= 120 {
			break
		}
	}
	if slices.Min(got) < 120 {
		t.Errorf("pages cached when the program started: %v of 128 each, want all prefetched", got)
	}
	if got := probe("none"); slices.Max(got) > 8 {
		t.Errorf("noop run (backend none): %v pages cached, want none prefetched", got)
	}
	runs++
	p, _ = LoadProfile(prof, res.Program)
	if want := min(runs, DefaultKeep); len(p.Launches) != want {
		t.Errorf("profile has %d launches after %d runs (keep %d), want %d", len(p.Launches), runs, DefaultKeep, want)
	}
}

func rangesPages(rs []policies.Range) uint64 {
	var n uint64
	for _, r := range rs {
		n += uint64(r.N)
	}
	return n
}

// TestRunExitStatus: the command's status, 128+N for a signal.
func TestRunExitStatus(t *testing.T) {
	requireSource(t)
	self, _ := os.Executable()
	helperEnv(t, "read", nil, "PREDICTIO_LIVE_EXIT", "7")
	res, _, _ := runOnce(t, RunConfig{Command: []string{self}})
	if res.ExitCode != 7 {
		t.Errorf("exit %d, want 7", res.ExitCode)
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		helperEnv(t, "signal", nil, "PREDICTIO_LIVE_SIGNAL", strconv.Itoa(int(sig)))
		res, _, _ := runOnce(t, RunConfig{Command: []string{self}})
		if res.ExitCode != 128+int(sig) {
			t.Errorf("killed by %v: exit %d, want %d", sig, res.ExitCode, 128+int(sig))
		}
	}
	if _, err := Run(context.Background(), RunConfig{Command: []string{"/nonexistent/predictio-test"}}); !errors.Is(err, ErrCommand) {
		t.Errorf("missing command: %v", err)
	}
}

// TestRunFailsOpen: without the privileges to trace, the command still
// runs, with exactly one warning, and its status comes back.
func TestRunFailsOpen(t *testing.T) {
	requireSource(t)
	bin := buildPredictio(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	self, _ := os.Executable()
	// Root without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN.
	// A new profile: the run would learn, so it traces.
	prof := filepath.Join(t.TempDir(), "p")
	cmd := exec.Command("setpriv", "--inh-caps=-bpf,-perfmon,-sys_admin", "--bounding-set=-bpf,-perfmon,-sys_admin", "--",
		bin, "run", "--profile", prof, "--daemon-socket", "", "--", self)
	cmd.Env = append(os.Environ(), "PREDICTIO_LIVE_HELPER=read", "PREDICTIO_LIVE_FILES="+self, "PREDICTIO_LIVE_EXIT=5")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("untraced run: %v, want exit 5; stderr %q", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "tracing unavailable") || !strings.Contains(lines[0], "CAP_") || !strings.Contains(lines[0], "not learned") {
		t.Errorf("want one warning naming the missing capabilities, got %q", stderr.String())
	}
}

// buildPredictio builds the predictio binary for tests that run it.
func buildPredictio(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "predictio")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/predictio/predictio/cmd/predictio")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build predictio: %v", err)
	}
	return bin
}

// TestRunRefusesAnUnsafeProfileDir: a profile directory others may write
// is not used (one warning; the command runs).
func TestRunRefusesAnUnsafeProfileDir(t *testing.T) {
	requireSource(t)
	dir := filepath.Join(t.TempDir(), "p")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	self, _ := os.Executable()
	helperEnv(t, "read", nil)
	res, _, warn := runOnce(t, RunConfig{Command: []string{self}, Profile: dir})
	if res.Learned || !strings.Contains(warn, "lets others in") || res.ExitCode != 0 {
		t.Errorf("learned %v, exit %d, warning %q", res.Learned, res.ExitCode, warn)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("wrote into an unsafe directory: %v", ents)
	}
}

// TestRunExecChain: a shim that execs the real program is one launch: the
// profile is keyed by the shim and holds the program's files.
func TestRunExecChain(t *testing.T) {
	requireSource(t)
	files := testFiles(t, 2, 256<<10)
	self, _ := os.Executable()
	shim := filepath.Join(t.TempDir(), "shim")
	if err := os.WriteFile(shim, []byte("#!/bin/sh\nexec /usr/bin/env \""+self+"\" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	aged(t, shim)
	prof := filepath.Join(t.TempDir(), "profiles")
	helperEnv(t, "read", files)
	res, _, warn := runOnce(t, RunConfig{Command: []string{shim}, Profile: prof})
	if !res.Learned || warn != "" {
		t.Fatalf("learned %v, warnings %q", res.Learned, warn)
	}
	if res.Program != shim {
		t.Errorf("profile keyed by %s, want the shim %s", res.Program, shim)
	}
	p, err := LoadProfile(prof, shim)
	if err != nil || p == nil {
		t.Fatal(err)
	}
	var paths []string
	for _, s := range p.Plan() {
		paths = append(paths, s.File.Path)
	}
	for _, want := range append([]string{"/usr/bin/env", shim, self}, files...) {
		if !slices.Contains(paths, want) {
			t.Errorf("profile of the shim lacks %s (has %d files)", want, len(paths))
		}
	}
	if p.Ran.Path == "" {
		t.Error("profile has no Ran (the file the kernel ran for the shim)")
	}
	if n, _ := filepath.Glob(filepath.Join(prof, "*"+policies.LaunchProfileExt)); len(n) != 1 {
		t.Errorf("%d profiles for one launch, want 1: %v", len(n), n)
	}
}

// TestRunInvalidation: a profile file that changed is not prefetched and
// is relearned; a changed program relearns the whole profile.
func TestRunInvalidation(t *testing.T) {
	requireSource(t)
	files := testFiles(t, 2, 256<<10)
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	self, _ := os.Executable()
	copyFile(t, self, prog)
	prof := filepath.Join(dir, "profiles")
	helperEnv(t, "read", files)
	runOnce(t, RunConfig{Command: []string{prog}, Profile: prof})

	// Rewrite files[1] (new mtime, same size): the next run must not
	// prefetch its old identity.
	old, _ := os.ReadFile(files[1])
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(files[1], old, 0o644); err != nil {
		t.Fatal(err)
	}
	evict(t, files)
	helperEnv(t, "probe", files, "PREDICTIO_LIVE_WAIT_MS", "300")
	res, out, _ := runOnce(t, RunConfig{Command: []string{prog}, Profile: prof})
	c, _ := probed(t, out)
	if res.Loop.ProfileFiles.Changed != 1 {
		t.Errorf("%d profile files changed, want 1", res.Loop.ProfileFiles.Changed)
	}
	if c[1] != 0 {
		t.Errorf("the changed file had %d pages prefetched, want 0", c[1])
	}
	p, _ := LoadProfile(prof, prog)
	var st unix.Stat_t
	unix.Stat(files[1], &st)
	for _, s := range p.Plan() {
		if s.File.Path == files[1] && s.File.MtimeNS != st.Mtim.Nano() {
			t.Errorf("profile still holds the old identity of %s", files[1])
		}
	}

	// A new binary: the profile is learned again from this run alone.
	copyFile(t, self, prog)
	helperEnv(t, "read", files)
	res, _, _ = runOnce(t, RunConfig{Command: []string{prog}, Profile: prof})
	if res.Launches != 0 || !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "changed since") }) {
		t.Errorf("after the binary changed: %d launches used, notes %q", res.Launches, res.Notes)
	}
	p, _ = LoadProfile(prof, prog)
	if len(p.Launches) != 1 {
		t.Errorf("profile has %d launches after relearning, want 1", len(p.Launches))
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(to)
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestRunOutput: -o records the run into a bundle, with its exec rows.
func TestRunOutput(t *testing.T) {
	requireSource(t)
	files := testFiles(t, 1, 128<<10)
	self, _ := os.Executable()
	out := filepath.Join(t.TempDir(), "bundle")
	helperEnv(t, "read", files)
	res, _, warn := runOnce(t, RunConfig{Command: []string{self}, Output: out})
	if warn != "" || res.Bundle == nil {
		t.Fatalf("warnings %q, bundle %+v", warn, res.Bundle)
	}
	b, err := formats.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if src := b.Manifest().Recording.Source; src != "run" {
		t.Errorf("recording.source %q, want run", src)
	}
	fs, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint32]string{}
	for _, f := range fs {
		ids[f.ID] = f.Path
	}
	cur, err := b.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	var execs, reads int
	for cur.Next() {
		a := cur.At()
		switch {
		case a.Kind == formats.KindExec && ids[a.FileID] == self:
			execs++
		case policies.IsDemand(a.Kind) && ids[a.FileID] == files[0]:
			reads += int(a.NPages)
		}
	}
	if execs == 0 || reads < 32 {
		t.Errorf("bundle: %d exec rows of the command, %d pages read of its file", execs, reads)
	}
}

// learnThenRecord learns a profile of the helper reading three cold files,
// evicts them, and records the next run into a bundle.
func learnThenRecord(t *testing.T) (prof, bundle string) {
	t.Helper()
	requireSource(t)
	files := testFiles(t, 3, 512<<10)
	prof = filepath.Join(t.TempDir(), "profiles")
	self, _ := os.Executable()
	helperEnv(t, "read", files)
	runOnce(t, RunConfig{Command: []string{self}, Profile: prof})
	evict(t, files)
	bundle = filepath.Join(t.TempDir(), "b")
	runOnce(t, RunConfig{Command: []string{self}, Output: bundle})
	return prof, bundle
}

// TestLaunchScoredInSimulate: the launch policy runs from a bundle's exec
// rows in simulate, like every policy: a profile learned by one run
// covers the cold misses of the next run's bundle.
func TestLaunchScoredInSimulate(t *testing.T) {
	prof, bundle := learnThenRecord(t)

	in, err := simulate.OpenInput(bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dev, err := simulate.Preset("nvme")
	if err != nil {
		t.Fatal(err)
	}
	cfg := simulate.Config{PageSize: in.PageSize, CacheBytes: 1 << 30, Device: dev, Env: in.Env(),
		Policies: []string{"launch:profile=" + prof}}
	src, err := in.Source()
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rep, err := simulate.Run(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	lane := rep.Lane("launch")
	if lane == nil {
		t.Fatalf("no launch lane in %+v", rep.Policies)
	}
	if lane.Prefetched < 3*128 || lane.Coverage < 0.9 {
		t.Errorf("launch lane: prefetched %d pages, coverage %.2f; want the 384 pages of the files and coverage >= 0.9", lane.Prefetched, lane.Coverage)
	}
}

// TestRunEffect: with RunConfig.Effect the run reports what its
// prefetches were worth: the pages of the profile's files the program
// read were prefetched and used in time, and the noop run's program read
// them itself.
func TestRunEffect(t *testing.T) {
	requireSource(t)
	files := testFiles(t, 3, 512<<10)
	prof := filepath.Join(t.TempDir(), "profiles")
	self, _ := os.Executable()
	helperEnv(t, "read", files)
	runOnce(t, RunConfig{Command: []string{self}, Profile: prof})
	var res *RunResult
	for range 3 { // another test's drop_caches may take the prefetched pages first
		evict(t, files)
		res, _, _ = runOnce(t, RunConfig{Command: []string{self}, Profile: prof, Effect: true})
		if !res.Effect.Configured {
			t.Skipf("no effect observer: %q", res.Notes)
		}
		if res.Effect.Policies["launch"].UsedInTime >= 3*120 {
			break
		}
	}
	if e := res.Effect.Policies["launch"]; e.UsedInTime < 3*120 || e.Prefetched < e.UsedInTime {
		t.Errorf("launch: %v; want the 384 pages of the files prefetched and used in time", e)
	}
	if err := res.Effect.Total.Check(); err != nil {
		t.Error(err)
	}
	evict(t, files)
	res, _, _ = runOnce(t, RunConfig{Command: []string{self}, Profile: prof, Effect: true, Backend: "none"})
	if e := res.Effect.Total; e.DemandRead < 3*120 || e.UsedInTime > 8 {
		t.Errorf("noop run: %v; want the program to read the files itself", e)
	}
}

// TestRunAdaptersSQLite: with the sqlite adapter in front of the tree
// policy, a scan by the unmodified sqlite3 CLI becomes tree events and
// prefetch requests while it runs.
func TestRunAdaptersSQLite(t *testing.T) {
	requireSource(t)
	sqlite, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("sqlite3 not installed (scripts/setup.sh installs it)")
	}
	db := filepath.Join(tracetest.DiskDir(t), "t.db")
	build := exec.Command(sqlite, db, "create table t(k integer primary key, v text);"+
		"with recursive c(x) as (select 1 union all select x+1 from c limit 20000) insert into t select x, printf('%0100d', x) from c;")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the database: %v: %s", err, out)
	}
	evict(t, []string{db})
	res, out, warn := runOnce(t, RunConfig{Command: []string{sqlite, db, "select sum(length(v)) from t"}, Adapters: []string{"sqlite"}, Policies: []string{"tree"}})
	if warn != "" || strings.TrimSpace(out) != "2000000" {
		t.Fatalf("sqlite3 printed %q, warnings %q", out, warn)
	}
	a := res.Adapters
	if a == nil || a.Recognized < 1 || a.TreeEvents == 0 {
		t.Fatalf("adapters: %+v; want the database recognized and tree events derived", a)
	}
	if p := res.Loop.Policies[0]; p.Name != "tree" || p.Requests == 0 {
		t.Errorf("tree policy: %+v; want requests from the derived events", p)
	}
}

// TestRunFreshProfileIsNotTraced: once a profile is full and fresh, a run
// neither learns nor traces (no BPF is loaded: it costs the command only
// run's start-up) and still prefetches the profile.
func TestRunFreshProfileIsNotTraced(t *testing.T) {
	requireSource(t)
	files := testFiles(t, 2, 256<<10)
	prof := filepath.Join(t.TempDir(), "profiles")
	self, _ := os.Executable()
	helperEnv(t, "read", files)
	for range 2 {
		runOnce(t, RunConfig{Command: []string{self}, Profile: prof, Keep: 2, Refresh: time.Hour})
	}
	evict(t, files)
	helperEnv(t, "probe", files, "PREDICTIO_LIVE_WAIT_MS", "300")
	// The CLI's default adapters (all) need events only for tree or
	// tensor: they must not make this run traced.
	res, out, _ := runOnce(t, RunConfig{Command: []string{self}, Profile: prof, Keep: 2, Refresh: time.Hour, Adapters: []string{"sqlite", "lmdb", "gguf"}})
	if res.Traced || res.Learned || res.Untraced != nil {
		t.Errorf("traced %v, learned %v, untraced %v: want a run that only prefetches", res.Traced, res.Learned, res.Untraced)
	}
	if c, _ := probed(t, out); slices.Min(c) < 60 {
		t.Errorf("pages cached at the start: %v of 64", c)
	}
	// Refresh 0: every run learns.
	res, _, _ = runOnce(t, RunConfig{Command: []string{self}, Profile: prof, Keep: 2})
	if !res.Traced || !res.Learned {
		t.Errorf("refresh 0: traced %v, learned %v", res.Traced, res.Learned)
	}
}

// TestRunOutputFileKeepsProfileFresh: a launch that writes a file (a
// compiler's object file) does not learn that file into its profile, so
// that the next write does not invalidate the profile and make every
// later run learn (and be traced) again.
func TestRunOutputFileKeepsProfileFresh(t *testing.T) {
	requireSource(t)
	files := testFiles(t, 1, 256<<10)
	out := filepath.Join(t.TempDir(), "out.o")
	prof := filepath.Join(t.TempDir(), "profiles")
	cmd := []string{"/bin/sh", "-c", "cat " + files[0] + " > /dev/null; date +%N > " + out}
	for i := range 5 {
		res, _, warn := runOnce(t, RunConfig{Command: cmd, Profile: prof, Keep: 2, Refresh: time.Hour})
		if learning := i < 2; res.Learned != learning || res.Traced != learning {
			t.Errorf("run %d: learned %v, traced %v, want %v (warnings: %s)", i+1, res.Learned, res.Traced, learning, warn)
		}
		time.Sleep(30 * time.Millisecond) // past mtimeSlack
	}
}

// TestLaunchScoredInReplay: replay runs the launch policy from a bundle's
// exec rows: with the learned profile the replayed launch's pages are
// prefetched and used in time.
func TestLaunchScoredInReplay(t *testing.T) {
	prof, bundle := learnThenRecord(t)
	r, err := replay.New(bundle, replay.Options{Backend: replay.BackendKernel, Timing: replay.TimingRecorded,
		Runs: []string{replay.Baseline, "launch:profile=" + prof}, MaxResidue: 1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Replay(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var launch *replay.Run
	for _, run := range rep.Runs {
		if strings.HasPrefix(run.Policy, "launch") {
			launch = run
		}
	}
	if launch == nil {
		t.Fatalf("no launch run in %+v", rep.Runs)
	}
	if launch.EffectNote == "" && launch.UsedInTime < 3*120 {
		t.Errorf("replayed launch: %v; want the files' 384 pages prefetched and used in time", launch.Counts)
	}
	if launch.Counters.PagesRequested < 3*128 {
		t.Errorf("replayed launch: %d pages requested, want the 384 of the files", launch.Counters.PagesRequested)
	}
}
