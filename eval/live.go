package eval

import (
	"bytes"
	"context"
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
	bin     string
	missing string // why predictio run cannot be used; "" when it can
	noop    string // why noop (runtime on, requests discarded) cannot run; "" when it can
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
	if !regexp.MustCompile(`\bnone\b`).MatchString(help) {
		lr.noop = "needs `predictio run --backend none` (runtime on, requests discarded); this build's run has no such backend"
	}
	return lr
}

// command returns the argv that runs argv under predictio run with the
// policies and backend, or the reason it cannot.
func (lr *liveRuntime) command(policies []string, backend string, argv []string) ([]string, string) {
	if lr.missing != "" {
		return nil, lr.missing
	}
	if backend == "none" && lr.noop != "" {
		return nil, lr.noop
	}
	out := []string{lr.bin, "run"}
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
