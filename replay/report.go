package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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
	SkippedKinds     uint64  `json:"skipped_accesses"`
	UnknownFileRows  uint64  `json:"unknown_file_rows,omitempty"`
	UnknownFileHints uint64  `json:"unknown_file_hints,omitempty"`
	PagesPastEOF     uint64  `json:"pages_past_eof,omitempty"`
	Runs             []*Run  `json:"runs"`
	Summary          Summary `json:"summary"`
}

// Spread is a median with the minimum and maximum over rounds.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// PolicySummary summarises the rounds of one run spec.
type PolicySummary struct {
	Policy     string  `json:"policy"`
	Rounds     int     `json:"rounds"`
	WallNS     Spread  `json:"wall_ns"`
	StallNS    Spread  `json:"stall_ns"`
	P50US      Spread  `json:"p50_us"`
	P99US      Spread  `json:"p99_us"`
	Prefetched Spread  `json:"pages_prefetched"`
	Used       Spread  `json:"pages_used"`
	Wasted     Spread  `json:"pages_wasted"`
	Submitted  Spread  `json:"pages_submitted"`
	Cached     Spread  `json:"pages_skipped_cached"`
	Dropped    Spread  `json:"dropped"`
	InFlight   Spread  `json:"inflight_max"`
	Misses     Spread  `json:"demand_misses"`
	DeviceMiB  Spread  `json:"device_read_mib"`
	Speedup    float64 `json:"speedup"` // median baseline wall ÷ median wall
	// StallSpeedup is median baseline stall ÷ median stall.
	StallSpeedup float64 `json:"stall_speedup"`
	// PredictedWallNS and Predicted are simulate's prediction for this
	// run spec (predict.go): its wall time, and the baseline's predicted
	// wall over it (1 for the baseline); 0 with --no-predict.
	PredictedWallNS float64 `json:"predicted_wall_ns"`
	Predicted       float64 `json:"predicted_speedup"`
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

func (rep *Report) summarize(specs []string) {
	rep.Summary = Summary{}
	var base *PolicySummary
	for _, spec := range specs {
		ps := PolicySummary{Policy: spec}
		var wall, stall, p50, p99, pre, used, wasted, sub, cached, dropped, infl, miss, dev []float64
		for _, r := range rep.Runs {
			if r.Policy != spec {
				continue
			}
			ps.Rounds++
			wall = append(wall, float64(r.WallNS))
			stall = append(stall, float64(r.StallNS))
			p50 = append(p50, r.P50US)
			p99 = append(p99, r.P99US)
			pre = append(pre, float64(r.Prefetched))
			used = append(used, float64(r.Used))
			wasted = append(wasted, float64(r.Wasted))
			sub = append(sub, float64(r.Counters.PagesSubmitted))
			cached = append(cached, float64(r.Counters.PagesCached))
			dropped = append(dropped, float64(r.Counters.Dropped))
			infl = append(infl, float64(r.Counters.InFlightMax))
			miss = append(miss, float64(r.DemandMisses))
			dev = append(dev, float64(r.DeviceReadBytes)/(1<<20))
		}
		ps.WallNS, ps.StallNS, ps.P50US, ps.P99US = spreadOf(wall), spreadOf(stall), spreadOf(p50), spreadOf(p99)
		ps.Prefetched, ps.Used, ps.Wasted = spreadOf(pre), spreadOf(used), spreadOf(wasted)
		ps.Submitted, ps.Cached, ps.Dropped, ps.InFlight = spreadOf(sub), spreadOf(cached), spreadOf(dropped), spreadOf(infl)
		ps.Misses, ps.DeviceMiB = spreadOf(miss), spreadOf(dev)
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
	fmt.Fprintln(tw, "policy\tround\tbackend\tstate\twall\tstall\tp50 µs\tp99 µs\tprefetched\tused\twasted\tmisses\tsubmitted\tskipped cached\tdropped\tinflight max\tdevice MiB\t")
	for _, r := range rep.Runs {
		state := "warm"
		if r.Cold {
			state = "cold"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%.1f\t\n", r.Policy, r.Round, r.Backend, state,
			ms(float64(r.WallNS)), ms(float64(r.StallNS)), r.P50US, r.P99US, r.Prefetched, r.Used, r.Wasted, missText(r),
			r.Counters.PagesSubmitted, r.Counters.PagesCached, r.Counters.Dropped, r.Counters.InFlightMax, float64(r.DeviceReadBytes)/(1<<20))
	}
	tw.Flush()
	fmt.Fprintln(bw, "\nSummary (median [min..max] over rounds):")
	tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\trounds\twall\tstall\tp50 µs\tp99 µs\tprefetched\tused\twasted\tdropped\tspeedup\tpredicted\t")
	for _, p := range rep.Summary.Policies {
		sp, pred := "-", "-"
		if p.Speedup > 0 {
			sp = fmt.Sprintf("%.2f×", p.Speedup)
		}
		if p.Predicted > 0 {
			pred = fmt.Sprintf("%.2f×", p.Predicted)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Policy, p.Rounds,
			strings.TrimSuffix(spreadMS(p.WallNS), ""), spreadMS(p.StallNS), spreadUS(p.P50US), spreadUS(p.P99US),
			count(p.Prefetched), count(p.Used), count(p.Wasted), count(p.Dropped), sp, pred)
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
	for _, r := range rep.Runs {
		for _, wmsg := range r.Warnings {
			fmt.Fprintf(bw, "warning: %s round %d: %s\n", r.Policy, r.Round, wmsg)
		}
	}
	return bw.Flush()
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
