package eval

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/harness"
	"github.com/predictio/predictio/live/launchbench"
	"github.com/predictio/predictio/record"
)

func init() { Register(launchSuite{}) }

// launchSuite is the paper's figure 10: cold launches of real, unmodified
// programs, baseline against predictio run's launch profile (issue 12).
// The paper used five desktop applications; these are the command-line
// programs of issue 12, plus LibreOffice where it is installed.
type launchSuite struct{}

func (launchSuite) Info() Info {
	return Info{
		Name: "launch", Figures: "10",
		Measures: "cold-launch wall time of real programs (python3 with 11 stdlib imports, node with 4 core modules, gcc compiling a C file, sqlite3 opening a database and querying it, LibreOffice headless where installed): baseline, noop (predictio run, requests discarded), predictio run's launch profile and predictio daemon running, each learned from 3 cold launches, whole command timed",
		Needs:    "root with eBPF (predictio record finds each launch's files for the cold check); python3, node, gcc, sqlite3 (scripts/setup.sh); predictio run and daemon (issue 12) for the noop, predictio and daemon modes; libreoffice-writer-nogui for the large program (scripts/setup.sh)",
		Expected: func(quick bool, dev harness.Preset) time.Duration {
			switch {
			case quick:
				return 45 * time.Second
			case dev.Name == "hdd":
				return 40 * time.Minute
			}
			return 4 * time.Minute
		},
		Paper: []PaperFigure{{Figure: "10", Caption: "cold start of five unmodified desktop applications (Firefox, VSCode, Shotcut, PyCharm, Blender...) with the history-based launch policy, normalized to Baseline",
			Values: []string{"PredictIO reduces mean cold-start latency by 5.3-26.3% (geometric mean 13.4%)", "Firefox and VSCode benefit most, PyCharm least",
				"per-application values are in the figure only, not in the text"}}},
		Compare: func(s *SuiteResult) []Comparison {
			return []Comparison{
				{"cold launch with the daemon running (the paper's method), geometric mean of daemon / Baseline over the programs", "0.866 (-13.4%; five desktop apps, -5.3% to -26.3%)", geomeanText(s, "daemon", "baseline")},
				{"cold launch under predictio run (its start-up included), geometric mean of predictio / Baseline", "- (the paper has no per-command wrapper)", geomeanText(s, "predictio", "baseline")},
				{"cold launch, python3, daemon / Baseline", "-", ratioText(s, "python3", "daemon", "baseline", "wall_s")},
				{"cold launch, python3, predictio run / Baseline", "-", ratioText(s, "python3", "predictio", "baseline", "wall_s")},
				{"cold launch, Noop / Baseline, python3 (the runtime's cost)", "-", ratioText(s, "python3", "noop", "baseline", "wall_s")},
			}
		},
		Plots: func(s *SuiteResult) []*Figure {

			modes := []string{"baseline", "noop", "predictio", "daemon"}
			return []*Figure{normalizedBars(s, "launch-normalized", "Cold launch, normalized to baseline (figure 10)", "wall time / Baseline", "wall_s", "baseline", modes)}
		},
	}
}

// launchProgram is one program of the suite.
type launchProgram struct {
	id   string
	argv []string
	need string // the Debian package, for the not-run message
}

func launchPrograms(dir string) []launchProgram {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	return []launchProgram{
		{"python3", []string{py, "-c", "import json, csv, decimal, email.parser, http.client, xml.dom.minidom, sqlite3, argparse, logging, unittest, asyncio"}, "python3"},
		{"node", []string{"node", "-e", "require('http'); require('crypto'); require('zlib'); require('stream')"}, "nodejs"},
		{"gcc", []string{"gcc", "-O2", "-c", filepath.Join(dir, "hello.c"), "-o", filepath.Join(dir, "hello.o")}, "gcc"},
		{"sqlite3", []string{"sqlite3", filepath.Join(dir, "small.db"), "SELECT count(*), sum(length(v)) FROM t WHERE k BETWEEN 100 AND 900"}, "sqlite3"},
		{"libreoffice", []string{"soffice", "--headless", "--convert-to", "pdf", "--outdir", dir, filepath.Join(dir, "doc.txt")}, "libreoffice-writer-nogui"},
	}
}

func (launchSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	dir := c.workPath("launch")
	if err := launchFixtures(ctx, dir); err != nil {
		return nil, err
	}
	lr := probeRun(ctx, c.Predictio)
	progs := launchPrograms(dir)
	if c.Quick {
		progs = progs[:2]
	}
	plan := &Plan{Notes: []string{"Each launch's files (executable, libraries, modules, data) come from one predictio record of it; before every run they are evicted and counted. " +
		"Pages that other processes keep mapped (libc, ld.so, locale files) cannot be evicted: a run whose only residue is such pages counts as cold, and the residue is named."}}
	if lr.missing == "" {
		plan.Notes = append(plan.Notes, selfColdRead(ctx, c))
	}
	for _, pr := range progs {
		ps := &PointSpec{ID: pr.id, Params: map[string]string{"program": pr.id, "command": strings.Join(pr.argv, " ")}, Est: time.Second}
		if _, err := exec.LookPath(pr.argv[0]); err != nil {
			ps.NotRun = fmt.Sprintf("needs %s (apt-get install %s)", pr.argv[0], pr.need)
			ps.Modes = []ModeSpec{{Name: "baseline"}, {Name: "noop"}, {Name: "predictio"}}
			plan.Points = append(plan.Points, ps)
			continue
		}
		files, note := launchFiles(ctx, c, pr)
		if note != "" {
			plan.Notes = append(plan.Notes, pr.id+": "+note)
		}
		ps.Files = files
		profile := filepath.Join(dir, "profile-"+pr.id)
		ps.Modes = append(ps.Modes, ModeSpec{Name: "baseline", Run: wallRun(nil, dir, pr.argv)})
		noop, why := lr.command(nil, "none", pr.argv)
		ps.Modes = append(ps.Modes, ModeSpec{Name: "noop", NotRun: why, Run: wallRun(lr, dir, withProfile(noop, profile))})
		pol, why := lr.command(nil, "", pr.argv)
		if why == "" {
			pol = withProfile(pol, profile)
			why = trainProfile(ctx, c, dir, pol, files)
		}
		ps.Modes = append(ps.Modes, ModeSpec{Name: "predictio", NotRun: why, Run: wallRun(lr, dir, pol)})
		ps.Modes = append(ps.Modes, daemonMode(ctx, c, daemonWorkload{id: pr.id, dir: dir, argv: pr.argv, files: files}))
		for _, spec := range c.Policies {
			argv, why := lr.command([]string{spec}, "", pr.argv)
			ps.Modes = append(ps.Modes, ModeSpec{Name: spec, NotRun: why, Run: wallRun(lr, dir, argv)})
		}
		plan.Points = append(plan.Points, ps)
	}
	return plan, nil
}

// withProfile inserts --profile DIR after "predictio run".
func withProfile(argv []string, dir string) []string {
	if len(argv) < 2 {
		return argv
	}
	return append([]string{argv[0], argv[1], "--profile", dir}, argv[2:]...)
}

// trainProfile makes 3 cold launches under predictio run so that its
// launch profile has learned the program (issue 12: learned from at most
// 3 launches); it returns why the predictio mode cannot run, or "".
func trainProfile(ctx context.Context, c *Context, dir string, argv, files []string) string {
	for i := range 3 {
		if _, err := harness.MakeCold(files, harness.ColdOptions{DropCaches: c.DropCaches}); err != nil {
			return "train the launch profile: " + err.Error()
		}
		if _, _, err := timed(ctx, dir, argv); err != nil {
			return fmt.Sprintf("train the launch profile (launch %d): %v", i+1, err)
		}
	}
	return ""
}

// wallRun times one run of argv.
func wallRun(lr *liveRuntime, dir string, argv []string) func(context.Context, *RunInfo) (*Sample, error) {
	return func(ctx context.Context, _ *RunInfo) (*Sample, error) {
		run, jf := lr.withJSON(argv, dir)
		el, _, err := timed(ctx, dir, run)
		if err != nil {
			return nil, err
		}
		s := &Sample{Metrics: map[string]float64{"wall_s": el.Seconds()}}
		if jf != "" {
			runCounters(jf, s)
		}
		return s, nil
	}
}

// launchFixtures writes the C file, the small database and the document
// the programs open.
func launchFixtures(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("set up launch: %w", err)
	}
	src := "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\nint main(int argc, char **argv) {\n\tchar buf[64];\n\tsnprintf(buf, sizeof buf, \"%d\", argc);\n\tputs(strlen(buf) > 1 ? argv[0] : buf);\n\treturn 0;\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "hello.c"), []byte(src), 0o644); err != nil {
		return fmt.Errorf("set up launch: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "doc.txt"), []byte(strings.Repeat("predictio launch document\n", 200)), 0o644); err != nil {
		return fmt.Errorf("set up launch: %w", err)
	}
	db := filepath.Join(dir, "small.db")
	if _, err := os.Stat(db); err == nil {
		return nil
	}
	if _, err := exec.LookPath("sqlite3"); err != nil {
		return nil // the sqlite3 point reports it
	}
	sql := "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT); WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i < 20000) INSERT INTO t SELECT i, hex(randomblob(200)) FROM s;"
	if _, _, err := timed(ctx, dir, []string{"sqlite3", db + ".tmp", sql}); err != nil {
		return fmt.Errorf("set up launch: %w", err)
	}
	return os.Rename(db+".tmp", db)
}

// launchFiles records one launch of pr and returns the regular files it
// touched, for the cold check. Without a recorder it falls back to the
// executable alone and says so.
func launchFiles(ctx context.Context, c *Context, pr launchProgram) ([]string, string) {
	exe, _ := exec.LookPath(pr.argv[0])
	tmp, err := os.MkdirTemp(c.WorkDir, "launch-record-")
	if err != nil {
		return []string{exe}, "cold check covers the executable only: " + err.Error()
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "bundle")
	_, err = record.Run(ctx, record.Config{Output: out, Command: pr.argv, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		return []string{exe}, "cold check covers the executable only (predictio record failed: " + err.Error() + ")"
	}
	b, err := formats.Open(out)
	if err != nil {
		return []string{exe}, "cold check covers the executable only: " + err.Error()
	}
	defer b.Close()
	fs, err := b.Files()
	if err != nil {
		return []string{exe}, "cold check covers the executable only: " + err.Error()
	}
	var files []string
	for _, f := range fs {
		if f.Path == "" || strings.HasPrefix(f.Path, c.WorkDir+"/launch-record-") {
			continue
		}
		if st, err := os.Stat(f.Path); err == nil && st.Mode().IsRegular() {
			files = append(files, f.Path)
		}
	}
	if len(files) == 0 {
		return []string{exe}, "cold check covers the executable only: the recording named no files"
	}
	return files, ""
}

// launchDaemon is the daemon of a daemon mode for one workload: its own
// configuration, profiles and status socket in the suite's directory,
// metrics off.
type launchDaemon struct {
	bin, config, socket, log string
	cur                      *launchbench.Daemon
}

// daemonWorkload is what a daemon mode measures: the command argv, run in
// dir (the daemon's files go into state, default dir), and the commands
// the daemon learns the program from first (nil: argv itself, 3 times),
// each after files are made cold; parse, when set, reads the command's
// output into the sample, as the point's other modes do.
type daemonWorkload struct {
	id, dir, state string
	argv           []string
	train          [][]string
	files          []string
	parse          func([]byte, *Sample) error
}

// daemonMode is the paper's way of running PredictIO: `predictio daemon`
// already running when the program starts, with no per-command start-up.
// It learns the program from 3 cold runs first; before each measured run
// the daemon is started ahead of the eviction (an idle daemon holds none
// of the workload's pages), and it is stopped after the run, once it has
// learned it.
func daemonMode(ctx context.Context, c *Context, w daemonWorkload) ModeSpec {
	m := ModeSpec{Name: "daemon"}
	state := w.state
	if state == "" {
		state = w.dir
	}
	d, why := newLaunchDaemon(ctx, c.Predictio, state, w.id, w.argv[0])
	if why == "" {
		why = d.train(ctx, c, w)
	}
	if why != "" {
		m.NotRun = why
		return m
	}
	m.Around = func(context.Context) (func(), error) {
		var err error
		if d.cur, err = launchbench.StartDaemon(d.bin, d.config, d.socket, d.log); err != nil {
			return nil, err
		}
		return func() {
			time.Sleep(100 * time.Millisecond) // it learns the launch when the program ends
			d.cur.Stop()
			d.cur = nil
		}, nil
	}
	m.Run = func(ctx context.Context, _ *RunInfo) (*Sample, error) {
		read0 := d.cur.ReadBytes()
		el, out, err := timed(ctx, w.dir, w.argv)
		if err != nil {
			return nil, err
		}
		s := &Sample{Metrics: map[string]float64{
			"wall_s": el.Seconds(),
			// What the daemon read from storage during the run: its prefetching.
			"daemon_read_pages": float64(d.cur.ReadBytes()-read0) / 4096,
		}}
		if w.parse != nil {
			if err := w.parse(out, s); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	return m
}

// newLaunchDaemon writes the configuration of a daemon learning the
// program name (workload id) into dir, or says why the daemon mode cannot
// run.
func newLaunchDaemon(ctx context.Context, bin, dir, id, name string) (*launchDaemon, string) {
	if bin == "" {
		return nil, "needs `predictio daemon` (no predictio binary)"
	}
	if out, err := exec.CommandContext(ctx, bin, "daemon", "-h").CombinedOutput(); err != nil && !strings.Contains(string(out), "-config") {
		return nil, "needs `predictio daemon` (issue 12), which this predictio build lacks"
	}
	exe, err := launchbench.Executable(name)
	if err != nil {
		return nil, err.Error() + " for the daemon's profile"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err.Error()
	}
	profiles := filepath.Join(dir, "daemon-profiles-"+id)
	if err := os.RemoveAll(profiles); err != nil {
		return nil, err.Error()
	}
	d := &launchDaemon{bin: bin, config: filepath.Join(dir, "daemon-"+id+".toml"),
		socket: filepath.Join(dir, "daemon-"+id+".sock"), log: filepath.Join(dir, "daemon.log")}
	cfg := launchbench.DaemonConfig{ProfileDir: profiles, Socket: d.socket, Programs: []string{exe}, Launches: 3}
	if err := cfg.Write(d.config); err != nil {
		return nil, err.Error()
	}
	return d, ""
}

// train makes 3 cold runs of w's training commands with the daemon
// running, so that it has learned the program (issue 12: learned from at
// most 3 launches), and checks that it stored a profile; it returns why
// the mode cannot run, or "".
func (d *launchDaemon) train(ctx context.Context, c *Context, w daemonWorkload) string {
	dm, err := launchbench.StartDaemon(d.bin, d.config, d.socket, d.log)
	if err != nil {
		return "train the daemon: " + err.Error()
	}
	defer dm.Stop()
	for i := range 3 {
		argv := w.argv
		if w.train != nil {
			argv = w.train[i%len(w.train)]
		}
		if _, err := harness.MakeCold(w.files, harness.ColdOptions{DropCaches: c.DropCaches}); err != nil {
			return "train the daemon: " + err.Error()
		}
		if _, _, err := timed(ctx, w.dir, argv); err != nil {
			return fmt.Sprintf("train the daemon (launch %d): %v", i+1, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := exec.CommandContext(ctx, d.bin, "daemon", "status", "--socket", d.socket).CombinedOutput()
	if err != nil {
		return "train the daemon: daemon status: " + err.Error()
	}
	if strings.Contains(string(out), "profiles: 0 ") {
		return "train the daemon: it learned no profile from 3 launches (daemon status: " + shorten(strings.TrimSpace(string(out)), 200) + ")"
	}
	return ""
}

// selfColdRead measures what a cold start of predictio itself reads of its
// own binary (`predictio version` after eviction), part of every cold
// launch under predictio run, and says so for the report.
func selfColdRead(ctx context.Context, c *Context) string {
	bin := c.Predictio
	if _, err := harness.MakeCold([]string{bin}, harness.ColdOptions{DropCaches: c.DropCaches}); err != nil {
		return "predictio's own cold read: not measured: " + err.Error()
	}
	el, _, err := timed(ctx, c.WorkDir, []string{bin, "version"})
	if err != nil {
		return "predictio's own cold read: not measured: " + err.Error()
	}
	r, err := harness.CountResident([]string{bin})
	if err != nil {
		return "predictio's own cold read: not measured: " + err.Error()
	}
	ra := fileRA(bin)
	return fmt.Sprintf("predictio run starts cold too: a cold `predictio version` took %.0f ms and read %.1f of the binary's %.1f MiB "+
		"(exec mappings are read around each fault by the disk's read_ahead_kb, %d KiB here); the noop mode's cost includes it.",
		el.Seconds()*1e3, float64(r.Resident)*4096/(1<<20), float64(r.Pages)*4096/(1<<20), ra.ReadAheadKB)
}
