package eval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
)

// modeRun accumulates one mode's rounds.
type modeRun struct {
	spec    ModeSpec
	res     *ModeResult
	values  map[string][]float64
	worst   *harness.ColdCheck
	failed  bool
	notes   map[string]bool
	allCold bool
}

// runPoint measures every mode of ps for its rounds, alternating: round r
// runs the modes starting from mode r (mod the number of modes), so that
// no mode always runs first after the eviction or last before the next.
func (x *runner) runPoint(ctx context.Context, suite string, ps *PointSpec) *Point {
	m := x.res.Machine
	p := &Point{Suite: suite, ID: ps.ID, Params: ps.Params, Quick: x.o.Quick, Rounds: x.rounds(ps),
		Hostname: m.Hostname, Kernel: m.Kernel, DevicePreset: x.presetOf(ps), Commit: m.Commit}
	if m.Dirty {
		p.Commit += "+dirty"
	}
	defer func() { p.FinishedAt = time.Now().UTC() }()
	if ps.NotRun != "" {
		p.Status, p.Reason, p.Cold = StatusNotRun, ps.NotRun, "not run"
		for _, ms := range ps.Modes {
			p.Modes = append(p.Modes, &ModeResult{Mode: ms.Name, Status: StatusNotRun, Reason: ps.NotRun})
		}
		x.prog.skip(suite, ps, p.Rounds)
		return p
	}
	if err := x.usePreset(ctx, ps); err != nil {
		p.Status, p.Reason, p.Cold = StatusNotRun, err.Error(), "not run"
		for _, ms := range ps.Modes {
			p.Modes = append(p.Modes, &ModeResult{Mode: ms.Name, Status: StatusNotRun, Reason: p.Reason})
		}
		x.prog.skip(suite, ps, p.Rounds)
		return p
	}
	defer func() { x.cur = x.throttle }()
	runs := make([]*modeRun, len(ps.Modes))
	for i, ms := range ps.Modes {
		runs[i] = &modeRun{spec: ms, res: &ModeResult{Mode: ms.Name}, values: map[string][]float64{},
			notes: map[string]bool{}, allCold: ps.Files != nil}
		if ms.NotRun != "" {
			runs[i].res.Status, runs[i].res.Reason = StatusNotRun, ms.NotRun
		}
	}
	for r := 0; r < p.Rounds && ctx.Err() == nil; r++ {
		for k := range runs {
			mr := runs[(k+r)%len(runs)]
			if mr.res.Status == StatusNotRun || mr.failed {
				x.prog.skipRun(ps)
				continue
			}
			x.runMode(ctx, suite, ps, mr, r, p.Rounds)
		}
	}
	for _, mr := range runs {
		p.Modes = append(p.Modes, mr.finish(p.Rounds))
	}
	p.Status, p.Reason = pointStatus(p.Modes)
	p.ColdVerified, p.Cold = pointCold(ps, runs)
	return p
}

// runMode makes the caches cold, runs one round of one mode under the
// device throttle and records what it measured.
func (x *runner) runMode(ctx context.Context, suite string, ps *PointSpec, mr *modeRun, round, rounds int) {
	if mr.spec.Around != nil {
		after, err := x.around(ctx, mr.spec.Around)
		if err != nil {
			mr.fail(err.Error())
			x.prog.skipRun(ps)
			return
		}
		defer after()
	}
	if ps.Files != nil {
		c, err := harness.MakeCold(ps.Files, harness.ColdOptions{DropCaches: !x.o.EvictOnly})
		if err != nil {
			mr.fail(fmt.Sprintf("make cold: %v", err))
			x.prog.skipRun(ps)
			return
		}
		if !c.Verified {
			mr.allCold = false
		}
		if mr.worst == nil || c.Resident > mr.worst.Resident {
			mr.worst = &c
		}
	}
	if err := x.enter(); err != nil {
		mr.fail(err.Error())
		x.prog.skipRun(ps)
		return
	}
	t0 := time.Now()
	s, err := mr.spec.Run(ctx, &RunInfo{Round: round, Mode: mr.spec.Name})
	el := time.Since(t0)
	if lerr := x.leave(); lerr != nil && err == nil {
		err = lerr
	}
	x.prog.ran(suite, ps, mr.spec.Name, round, rounds, el, s, err)
	if errors.Is(err, ErrNotRun) {
		mr.failed = true
		mr.res.Status, mr.res.Reason = StatusNotRun, err.Error()
		return
	}
	if err != nil {
		mr.fail(err.Error())
		return
	}
	for k, v := range s.Metrics {
		mr.values[k] = append(mr.values[k], v)
	}
	for _, n := range s.Notes {
		if !mr.notes[n] {
			mr.notes[n] = true
			mr.res.Notes = append(mr.res.Notes, n)
		}
	}
	mr.res.Rounds++
}

// around runs a mode's Around under the device throttle, so that what it
// starts (the daemon) reads through the same throttle as the workload.
func (x *runner) around(ctx context.Context, f func(context.Context) (func(), error)) (func(), error) {
	if err := x.enter(); err != nil {
		return nil, err
	}
	after, err := f(ctx)
	if lerr := x.leave(); lerr != nil && err == nil {
		after()
		return nil, lerr
	}
	return after, err
}

func (mr *modeRun) fail(reason string) {
	mr.failed = true
	mr.res.Status, mr.res.Reason = StatusFailed, reason
}

// finish summarizes the mode; a mode that ran fewer rounds than asked
// (interrupted) is not ok, so that a rerun measures it again.
func (mr *modeRun) finish(rounds int) *ModeResult {
	r := mr.res
	r.Metrics = map[string]harness.Summary{}
	for k, v := range mr.values {
		r.Metrics[k] = harness.Summarize(v)
	}
	r.Cold = mr.worst
	r.ColdVerified = mr.allCold && mr.worst != nil && r.Rounds > 0
	if r.Status == "" {
		r.Status = StatusOK
		if r.Rounds < rounds {
			r.Status, r.Reason = StatusFailed, fmt.Sprintf("interrupted after %d of %d rounds", r.Rounds, rounds)
		}
	}
	return r
}

func pointStatus(ms []*ModeResult) (string, string) {
	var ok, notRun int
	// Modes that share a reason are named together: "noop, tree: not run: needs ...".
	var reasons []string
	byReason := map[string][]string{}
	for _, m := range ms {
		var r string
		switch m.Status {
		case StatusOK:
			ok++
			continue
		case StatusNotRun:
			notRun++
			r = "not run: " + m.Reason
		default:
			r = m.Reason
		}
		if _, seen := byReason[r]; !seen {
			reasons = append(reasons, r)
		}
		byReason[r] = append(byReason[r], m.Mode)
	}
	var parts []string
	for _, r := range reasons {
		parts = append(parts, strings.Join(byReason[r], ", ")+": "+r)
	}
	switch {
	case ok == len(ms):
		return StatusOK, ""
	case ok > 0:
		return StatusPartial, joinSemi(parts)
	case notRun == len(ms):
		return StatusNotRun, joinSemi(parts)
	}
	return StatusFailed, joinSemi(parts)
}

// pointCold summarizes the cold checks of a point's runs.
func pointCold(ps *PointSpec, runs []*modeRun) (bool, string) {
	if ps.Files == nil {
		if ps.Cold != "" {
			return false, ps.Cold
		}
		return false, "not applicable"
	}
	var worst *harness.ColdCheck
	all, any := true, false
	for _, mr := range runs {
		if mr.res.Rounds == 0 {
			continue
		}
		any = true
		all = all && mr.allCold
		if mr.worst != nil && (worst == nil || mr.worst.Resident > worst.Resident) {
			worst = mr.worst
		}
	}
	if !any || worst == nil {
		return false, "no run"
	}
	if all {
		return true, "verified before every run: " + strings.TrimPrefix(worst.String(), "cold: ")
	}
	return false, "not verified: " + worst.String()
}
