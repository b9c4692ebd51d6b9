package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// liveRuntime is `predictio run` (issue 12) as the binary offers it. The
// suites run their workloads live through it; where this build has no run
// command, every mode that needs it is reported as not run.
type liveRuntime struct {
	bin       string
	missing   string // why predictio run cannot be used; "" when it can
	noop      string // why noop (runtime on, requests discarded) cannot run; "" when it can
	noProfile bool   // run has --no-profile (learn and apply no launch profile)
	json      bool   // run has --json FILE (its counters)
}

// needsRun is the reason given for modes that need predictio run.
const needsRun = "needs `predictio run` (the live runtime of issue 12), which this predictio build lacks"

// probeRun asks the binary whether it has `predictio run` and a backend
// that discards requests (--backend none), from its help text.
func probeRun(ctx context.Context, bin string) *liveRuntime {
	lr := &liveRuntime{bin: bin}
	if bin == "" {
		lr.missing, lr.noop = needsRun+" (no predictio binary)", needsRun
		return lr
	}
	cmd := exec.CommandContext(ctx, bin, "run", "-h")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	help := out.String()
	if strings.Contains(help, "unknown command") || (err != nil && !strings.Contains(help, "--policy") && !strings.Contains(help, "-policy")) {
		lr.missing, lr.noop = needsRun, needsRun
		return lr
	}
	lr.noProfile = strings.Contains(help, "-no-profile")
	lr.json = strings.Contains(help, "-json")
	if !regexp.MustCompile(`\bnone\b`).MatchString(help) {
		lr.noop = "needs `predictio run --backend none` (runtime on, requests discarded); this build's run has no such backend"
	}
	return lr
}

// command returns the argv that runs argv under predictio run with the
// policies and backend, or the reason it cannot. With policies, no launch
// profile is learned or applied (where run can be told so), so that only
// the named policies act.
func (lr *liveRuntime) command(policies []string, backend string, argv []string) ([]string, string) {
	if lr.missing != "" {
		return nil, lr.missing
	}
	if backend == "none" && lr.noop != "" {
		return nil, lr.noop
	}
	out := []string{lr.bin, "run"}
	if len(policies) > 0 && lr.noProfile {
		out = append(out, "--no-profile")
	}
	for _, p := range policies {
		out = append(out, "--policy", p)
	}
	if backend != "" {
		out = append(out, "--backend", backend)
	}
	return append(append(out, "--"), argv...), ""
}

// timed runs argv and returns its wall time and its output (stdout and
// stderr together, the last 64 KiB).
func timed(ctx context.Context, dir string, argv []string) (time.Duration, []byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	el := time.Since(t0)
	if err != nil {
		return el, out.b, fmt.Errorf("run %s: %v: %s", strings.Join(argv, " "), err, tail(out.b, 600))
	}
	return el, out.b, nil
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 64<<10 {
		t.b = append(t.b[:0], t.b[len(t.b)-64<<10:]...)
	}
	return len(p), nil
}

// parseFloatAfter returns the number before unit in s ("0.452 micros/op").
func parseFloatBefore(s, unit string) (float64, bool) {
	i := strings.Index(s, " "+unit)
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[:i])
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[len(f)-1], 64)
	return v, err == nil
}

// runCounters reads predictio run's --json document: the runtime's start-up
// and shutdown, its events and requests, and the backend's numeric
// counters (pages used in time, late, wasted, ...), as metrics prefixed
// run_; a run that could not trace is a note.
func runCounters(path string, s *Sample) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	os.Remove(path)
	var doc map[string]any
	if json.Unmarshal(b, &doc) != nil {
		return
	}
	for _, k := range []string{"startup_ns", "shutdown_ns", "events", "requests", "source_dropped"} {
		if v, ok := doc[k].(float64); ok {
			s.Metrics["run_"+k] = v
		}
	}
	if be, ok := doc["backend"].(map[string]any); ok {
		for k, v := range be {
			if f, ok := v.(float64); ok {
				s.Metrics["run_backend_"+snake(k)] = f
			}
		}
	}
	if t, ok := doc["traced"].(bool); ok && !t {
		s.Notes = append(s.Notes, fmt.Sprintf("predictio run did not trace (it fails open): %v", doc["untraced"]))
	}
}

// withJSON adds --json FILE after "predictio run" when run has it, and
// returns the file ("" when not).
func (lr *liveRuntime) withJSON(argv []string, dir string) ([]string, string) {
	if lr == nil || !lr.json || len(argv) < 2 || argv[1] != "run" {
		return argv, ""
	}
	f, err := os.CreateTemp(dir, "run-*.json")
	if err != nil {
		return argv, ""
	}
	f.Close()
	return append([]string{argv[0], argv[1], "--json", f.Name()}, argv[2:]...), f.Name()
}

// snake turns a Go field name (PagesSubmitted) into pages_submitted;
// names already in snake case stay.
func snake(k string) string {
	var b strings.Builder
	for i, r := range k {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
