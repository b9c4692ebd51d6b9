package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unsafe"
)

// Report is the result of a replay: every run, and per run spec the medians
// with their spread.
type Report struct {
	Bundle   string  `json:"bundle"`
	Backend  string  `json:"backend"`
	Timing   string  `json:"timing"`
	Speed    float64 `json:"speed"`
	Accesses int     `json:"accesses"`
	Pages    uint64  `json:"pages"`
	Threads  int     `json:"threads"`
	Hints    int     `json:"hints"`
	// Not replayed: access rows of other kinds (cache_add, readahead,
	// cache_delete), rows and hints naming unknown file ids, and pages
	// past the recorded end of file.
	SkippedKinds     uint64 `json:"skipped_accesses"`
	UnknownFileRows  uint64 `json:"unknown_file_rows,omitempty"`
	UnknownFileHints uint64 `json:"unknown_file_hints,omitempty"`
	PagesPastEOF     uint64 `json:"pages_past_eof,omitempty"`
	ExecRows         uint64 `json:"exec_rows,omitempty"`
	MetadataOps      int    `json:"metadata_ops,omitempty"`
	// ServiceTimes says whether the bundle's rows carry completion times;
	// without them think time counts from each access's start
	// (TimingFallback says so).
	ServiceTimes   bool    `json:"service_times"`
	TimingFallback string  `json:"timing_fallback,omitempty"`
	Runs           []*Run  `json:"runs"`
	Summary        Summary `json:"summary"`
}

// Spread is a median with the minimum and maximum over rounds.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// PolicySummary summarises the rounds of one run spec.
type PolicySummary struct {
	Policy     string `json:"policy"`
	Rounds     int    `json:"rounds"`
	WallNS     Spread `json:"wall_ns"`
	StallNS    Spread `json:"stall_ns"`
	P50US      Spread `json:"p50_us"`
	P99US      Spread `json:"p99_us"`
	Prefetched Spread `json:"pages_prefetched"`
	UsedInTime Spread `json:"pages_used_in_time"`
	Late       Spread `json:"pages_late"`
	Wasted     Spread `json:"pages_wasted"`
	Submitted  Spread `json:"pages_submitted"`
	Cached     Spread `json:"pages_skipped_cached"`
	Dropped    Spread `json:"dropped"`
	InFlight   Spread `json:"inflight_max"`
	Misses     Spread `json:"demand_misses"`
	DeviceMiB  Spread `json:"device_read_mib"`
	// BackendBusyNS is the kernel or kmod backend's time on requests
	// (Run.BackendBusyNS) over the timed rounds.
	BackendBusyNS Spread  `json:"backend_busy_ns"`
	Speedup       float64 `json:"speedup"` // median baseline wall ÷ median wall
	// StallSpeedup is median baseline stall ÷ median stall.
	StallSpeedup float64 `json:"stall_speedup"`
	// PredictedWallNS and Predicted are simulate's prediction for this
	// run spec (predict.go): its wall time, and the baseline's predicted
	// wall over it (1 for the baseline); 0 with --no-predict.
	// PredictedBackendBusyNS is the modelled backend's time on requests
	// (simulate's backend_busy_ns; 0 without the host model).
	PredictedWallNS        float64 `json:"predicted_wall_ns"`
	Predicted              float64 `json:"predicted_speedup"`
	PredictedBackendBusyNS float64 `json:"predicted_backend_busy_ns"`
}

// Summary holds one PolicySummary per run spec, and the speedup of the last
// policy over the baseline (the B of an A/B pair).
type Summary struct {
	Policies []PolicySummary `json:"policies"`
	// Speedup is the median wall-time speedup of the last non-baseline run
	// spec over the baseline (0 without a baseline).
	Speedup float64 `json:"speedup"`
	// PredictedSpeedup is simulate's prediction for the same policy.
	PredictedSpeedup float64 `json:"predicted_speedup,omitempty"`
	// PredictedCalibrated is true when the prediction's device model was
	// measured (a device profile), false for a preset or without one.
	PredictedCalibrated bool   `json:"predicted_calibrated"`
	Predictor           string `json:"predictor,omitempty"`

	// RecordedWallNS is the recording's wall time, from the start of the
	// first operation replay re-issues to the last one's completion (as
	// manifest timing.recorded_wall_ns, which older bundles measured over
	// every row).
	RecordedWallNS uint64 `json:"recorded_wall_ns,omitempty"`
	// Untraced says the recorder's cost was taken out of the think times
	// (--untraced), UntracedNS how much, summed over the threads; the
	// recorded wall is then the span of the moved rows.
	// UntracedOwnNS is replay's own system calls' cost taken out with it
	// (their way into and out of the kernel, which the recorded think
	// times already hold).
	Untraced      bool   `json:"untraced,omitempty"`
	UntracedNS    uint64 `json:"untraced_ns,omitempty"`
	UntracedOwnNS uint64 `json:"untraced_own_ns,omitempty"`
	// TimingError is |median baseline wall - recorded wall| / recorded
	// wall, computed for recorded timing at speed 1 with a baseline.
	// TimingTarget says whether replay's fidelity target applies (kernel
	// or none backend at the recorded paths); TimingNote why not, or what
	// else to know.
	TimingError  *float64 `json:"timing_error,omitempty"`
	TimingTarget bool     `json:"timing_target"`
	TimingNote   string   `json:"timing_note,omitempty"`
	// Fidelity is the baseline's per-kind comparison of recorded and
	// replayed times (Run.Fidelity), the median over its rounds.
	Fidelity []KindFidelity `json:"fidelity,omitempty"`
}

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// counted reports whether spec's timed runs carry its counts by effect:
// no run of its own counted them (Options.Effect separate).
func (rep *Report) counted(spec string) bool {
	for _, r := range rep.Runs {
		if r.Policy == spec && r.CountsOnly {
			return false
		}
	}
	return true
}

func (rep *Report) summarize(specs []string) {
	rep.Summary = Summary{}
	var base *PolicySummary
	for _, spec := range specs {
		ps := PolicySummary{Policy: spec}
		var wall, stall, p50, p99, pre, used, late, wasted, sub, cached, dropped, infl, miss, dev, busy []float64
		counted := rep.counted(spec)
		for _, r := range rep.Runs {
			if r.Policy != spec {
				continue
			}
			if r.CountsOnly || counted {
				pre = append(pre, float64(r.Prefetched))
				used = append(used, float64(r.UsedInTime))
				late = append(late, float64(r.Late))
				wasted = append(wasted, float64(r.Wasted))
			}
			if r.CountsOnly {
				continue
			}
			ps.Rounds++
			wall = append(wall, float64(r.WallNS))
			stall = append(stall, float64(r.StallNS))
			p50 = append(p50, r.P50US)
			p99 = append(p99, r.P99US)
			sub = append(sub, float64(r.Counters.PagesSubmitted))
			cached = append(cached, float64(r.Counters.PagesCached))
			dropped = append(dropped, float64(r.Counters.Dropped))
			infl = append(infl, float64(r.Counters.InFlightMax))
			miss = append(miss, float64(r.DemandMisses))
			dev = append(dev, float64(r.DeviceReadBytes)/(1<<20))
			busy = append(busy, float64(r.BackendBusyNS))
		}
		ps.WallNS, ps.StallNS, ps.P50US, ps.P99US = spreadOf(wall), spreadOf(stall), spreadOf(p50), spreadOf(p99)
		ps.Prefetched, ps.UsedInTime, ps.Late, ps.Wasted = spreadOf(pre), spreadOf(used), spreadOf(late), spreadOf(wasted)
		ps.Submitted, ps.Cached, ps.Dropped, ps.InFlight = spreadOf(sub), spreadOf(cached), spreadOf(dropped), spreadOf(infl)
		ps.Misses, ps.DeviceMiB, ps.BackendBusyNS = spreadOf(miss), spreadOf(dev), spreadOf(busy)
		rep.Summary.Policies = append(rep.Summary.Policies, ps)
		if spec == Baseline {
			b := ps
			base = &b
		}
	}
	if base == nil {
		return
	}
	for i := range rep.Summary.Policies {
		p := &rep.Summary.Policies[i]
		if p.WallNS.Median > 0 {
			p.Speedup = base.WallNS.Median / p.WallNS.Median
		}
		if p.StallNS.Median > 0 {
			p.StallSpeedup = base.StallNS.Median / p.StallNS.Median
		}
		if p.Policy != Baseline {
			rep.Summary.Speedup = p.Speedup
		}
	}
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func ms(ns float64) string { return strconv.FormatFloat(ns/1e6, 'f', 1, 64) + " ms" }

func spreadMS(s Spread) string {
	return fmt.Sprintf("%s [%s..%s]", ms(s.Median), strconv.FormatFloat(s.Min/1e6, 'f', 1, 64), strconv.FormatFloat(s.Max/1e6, 'f', 1, 64))
}

func spreadUS(s Spread) string {
	return fmt.Sprintf("%.1f [%.1f..%.1f]", s.Median, s.Min, s.Max)
}

func count(s Spread) string { return strconv.FormatFloat(s.Median, 'f', 0, 64) }

// WriteText writes the report as tables: one line per run, then the
// summary.
func (rep *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "bundle %s: %d accesses (%d pages) in %d threads, %d hints; backend %s, timing %s", rep.Bundle, rep.Accesses, rep.Pages, rep.Threads, rep.Hints, rep.Backend, rep.Timing)
	if rep.Timing == TimingRecorded && rep.Speed != 1 {
		fmt.Fprintf(bw, " ×%g", rep.Speed)
	}
	fmt.Fprintln(bw)
	if rep.UnknownFileRows+rep.UnknownFileHints+rep.PagesPastEOF > 0 {
		fmt.Fprintf(bw, "not replayed: %d access rows and %d hints naming unknown file ids, %d pages past the recorded end of file\n", rep.UnknownFileRows, rep.UnknownFileHints, rep.PagesPastEOF)
	}
	fmt.Fprintln(bw, "\nRuns (in the order run):")
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tround\tbackend\tstate\twall\tstall\tp50 µs\tp99 µs\tprefetched\tin time\tlate\twasted\tmisses\tsubmitted\tskipped cached\tdropped\tinflight max\tdevice MiB\t")
	for _, r := range rep.Runs {
		state := "warm"
		if r.Cold {
			state = "cold"
		}
		round := strconv.Itoa(r.Round)
		if r.CountsOnly {
			round = "counts" // its time is not in the summary
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t\n", r.Policy, round, r.Backend, state,
			ms(float64(r.WallNS)), ms(float64(r.StallNS)), r.P50US, r.P99US, effectText(r, r.Prefetched), effectText(r, r.UsedInTime), effectText(r, r.Late), effectText(r, r.Wasted), missText(r),
			r.Counters.PagesSubmitted, r.Counters.PagesCached, r.Counters.Dropped, r.Counters.InFlightMax, float64(r.DeviceReadBytes)/(1<<20))
	}
	tw.Flush()
	fmt.Fprintln(bw, "\nSummary (median [min..max] over rounds):")
	tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\trounds\twall\tstall\tp50 µs\tp99 µs\tprefetched\tin time\tlate\twasted\tdropped\tspeedup\tpredicted\t")
	for _, p := range rep.Summary.Policies {
		sp, pred := "-", "-"
		if p.Speedup > 0 {
			sp = fmt.Sprintf("%.2f×", p.Speedup)
		}
		if p.Predicted > 0 {
			pred = fmt.Sprintf("%.2f×", p.Predicted)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Policy, p.Rounds,
			spreadMS(p.WallNS), spreadMS(p.StallNS), spreadUS(p.P50US), spreadUS(p.P99US),
			count(p.Prefetched), count(p.UsedInTime), count(p.Late), count(p.Wasted), count(p.Dropped), sp, pred)
	}
	tw.Flush()
	vias := map[string]bool{}
	for _, r := range rep.Runs {
		if r.Via != "" && !vias[r.Via] {
			vias[r.Via] = true
			fmt.Fprintf(bw, "\nprefetches (%s backend): %s\n", r.Backend, r.Via)
		}
	}
	if rep.Summary.Predictor != "" {
		fmt.Fprintf(bw, "\npredicted: %s\n", rep.Summary.Predictor)
	}
	if e := rep.Summary.TimingError; e != nil {
		untraced := ""
		if rep.Summary.Untraced {
			untraced = fmt.Sprintf(" (untraced: the recorder's %s and replay's own system calls' %s taken out of the think times)", ms(float64(rep.Summary.UntracedNS)), ms(float64(rep.Summary.UntracedOwnNS)))
		}
		fmt.Fprintf(bw, "\ntiming: recorded wall%s %s, baseline replay wall (median) %s: timing error %.1f%%", untraced, ms(float64(rep.Summary.RecordedWallNS)), ms(rep.baselineWall()), 100**e)
		if rep.Summary.TimingNote != "" {
			fmt.Fprintf(bw, " (%s)", rep.Summary.TimingNote)
		}
		fmt.Fprintln(bw)
	}
	if len(rep.Summary.Fidelity) > 0 {
		writeFidelity(bw, rep.Summary.Fidelity)
	}
	if rep.TimingFallback != "" {
		fmt.Fprintf(bw, "\nnote: %s\n", rep.TimingFallback)
	}
	for _, r := range rep.Runs {
		if res := r.Residue; res != nil {
			fmt.Fprintf(bw, "\nresidue of %s round %d: %d of %d demanded pages (%.2f%%) stayed cached after eviction", r.Policy, r.Round, res.Pages, res.Demanded, 100*res.Fraction)
			if res.Warmed > 0 {
				fmt.Fprintf(bw, ", %d read in to match the first run", res.Warmed)
			}
			fmt.Fprintln(bw)
			for _, f := range res.Files {
				fmt.Fprintf(bw, "  %s: %d demanded pages (%d cached): %s\n", f.Path, f.Pages, f.Cached, f.Why)
			}
			if res.Extra > 0 {
				fmt.Fprintf(bw, "warning: %s round %d: %d pages more than the first run's residue stayed cached; this run is warmer than the others\n", r.Policy, r.Round, res.Extra)
			}
		}
	}
	notes := map[string]bool{}
	for _, r := range rep.Runs {
		if r.EffectNote != "" && !notes[r.EffectNote] {
			notes[r.EffectNote] = true
			fmt.Fprintf(bw, "\n%s backend: %s\n", r.Backend, r.EffectNote)
		}
	}
	for _, r := range rep.Runs {
		for _, wmsg := range r.Warnings {
			fmt.Fprintf(bw, "warning: %s round %d: %s\n", r.Policy, r.Round, wmsg)
		}
	}
	return bw.Flush()
}

// effectText prints an effect counter, or "?" where the run has none.
func effectText(r *Run, n uint64) string {
	if r.EffectNote != "" {
		return "?"
	}
	return strconv.FormatUint(n, 10)
}

func missText(r *Run) string {
	if r.Backend != BackendDirect {
		return "-"
	}
	return strconv.FormatUint(r.DemandMisses, 10)
}

// readBytes returns this process's storage read bytes (/proc/self/io), or 0.
func readBytes() uint64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("read_bytes: ")); ok {
			n, _ := strconv.ParseUint(string(v), 10, 64)
			return n
		}
	}
	return 0
}

func sortInt64(xs []int64) { slices.Sort(xs) }

// percentile returns the q-quantile of sorted xs (nearest rank).
func percentile(xs []int64, q float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(xs) {
		i = len(xs) - 1
	}
	return xs[i]
}

// alignedBuffer returns n bytes (rounded up to pages) aligned to the page
// size, as O_DIRECT needs.
func alignedBuffer(n int) []byte {
	ps := os.Getpagesize()
	n = (n + ps - 1) / ps * ps
	b := make([]byte, n+ps)
	off := int(uintptr(unsafe.Pointer(&b[0])) & uintptr(ps-1))
	if off != 0 {
		off = ps - off
	}
	return b[off : off+n : off+n]
}

// progress draws a progress bar for a run on opt.Progress and returns the
// function that stops it.
func (r *Replayer) progress(st *runState, spec string, round int) func() {
	w := r.opt.Progress
	if w == nil {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	total := int64(r.t.ops)
	label := fmt.Sprintf("%s %d/%d", spec, round+1, r.opt.Repeat)
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		drawn := false
		draw := func() {
			n := st.done.Load()
			const width = 30
			fill := int(n * width / max(total, 1))
			fmt.Fprintf(w, "\r%-24s [%s%s] %3d%% %d/%d accesses %s", label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
				n*100/max(total, 1), n, total, time.Since(st.start).Round(100*time.Millisecond))
			drawn = true
		}
		for {
			select {
			case <-stop:
				if drawn {
					draw()
					fmt.Fprintln(w)
				}
				return
			case <-tick.C:
				// Draw only runs that last: short runs print nothing.
				if time.Since(st.start) >= time.Second {
					draw()
				}
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// timing fills in the recorded wall and the timing error: how far the
// baseline replay's wall is from the program's.
func (rep *Report) timing(t *trace, opt *Options) {
	s := &rep.Summary
	s.RecordedWallNS = t.recordedWall
	s.Untraced, s.UntracedNS, s.UntracedOwnNS = opt.Untraced, t.tracerNS, t.ownNS
	if !t.serviceTimes {
		rep.TimingFallback = "this bundle lacks service times (format 1.0, or a recorder without them): think time counts from each access's start, " +
			"so the recorded gaps hold the recorded service times too and a cold replay runs longer than the program; record it again with predictio record for a faithful baseline"
	}
	var base *PolicySummary
	for i := range s.Policies {
		if s.Policies[i].Policy == Baseline {
			base = &s.Policies[i]
		}
	}
	var runs []*Run
	for _, r := range rep.Runs {
		if r.Policy == Baseline {
			runs = append(runs, r)
		}
	}
	s.Fidelity = medianFidelity(runs)
	switch {
	case s.RecordedWallNS == 0:
		s.TimingNote = "the manifest has no recorded wall (timing.recorded_wall_ns)"
		return
	case opt.Timing != TimingRecorded:
		s.TimingNote = "no timing error with --timing asap"
		return
	case opt.Speed != 1:
		s.TimingNote = "no timing error with --speed other than 1"
		return
	case base == nil:
		s.TimingNote = "no timing error without a baseline run"
		return
	}
	e := math.Abs(base.WallNS.Median-float64(s.RecordedWallNS)) / float64(s.RecordedWallNS)
	s.TimingError = &e
	switch {
	case opt.Backend == BackendDirect:
		s.TimingNote = "direct backend: no kernel readahead, so its baseline differs from the program's by design; no target"
	case opt.Root != "":
		s.TimingNote = "files under --root (materialized) are laid out unlike the recorded ones; the target applies at the recorded paths"
	default:
		s.TimingTarget = true
	}
}

// baselineWall is the baseline's median wall, or 0.
func (rep *Report) baselineWall() float64 {
	for _, p := range rep.Summary.Policies {
		if p.Policy == Baseline {
			return p.WallNS.Median
		}
	}
	return 0
}
