package replay

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/predictio/predictio/formats"
)

// KindFidelity compares one kind of operation as recorded and as replayed
// in a run: how long the operations took (service) and how long the thread
// spent between the previous operation's completion and each of them
// (think time recorded, wait replayed). Service times are summed over the
// operations whose recorded completion is known.
type KindFidelity struct {
	Kind string `json:"kind"`
	Ops  int    `json:"ops"`
	// RecordedServiceNS is the recorded operations' end_ns − ts_ns,
	// ServiceNS the replayed ones' time.
	RecordedServiceNS int64 `json:"recorded_service_ns"`
	ServiceNS         int64 `json:"service_ns"`
	// RecordedThinkNS is the recorded think time before each operation
	// (its start − the previous operation's completion), WaitNS the time
	// the replay spent between them: the think time plus how late its
	// wait ended (the kernel's wake-up latency, the dispatcher).
	RecordedThinkNS int64 `json:"recorded_think_ns"`
	WaitNS          int64 `json:"wait_ns"`
	// PredictedServiceNS and PredictedThinkNS are the predicted column's
	// (simulate's baseline lane, simulate.KindTimes): what the model
	// expects of ServiceNS and WaitNS. Absent without a prediction.
	PredictedServiceNS int64 `json:"predicted_service_ns,omitempty"`
	PredictedThinkNS   int64 `json:"predicted_think_ns,omitempty"`
}

// maxKinds bounds the access kinds counted per worker (formats kinds are
// below 16).
const maxKinds = 16

// kindTimes is a worker's per-kind tally.
type kindTimes [maxKinds]KindFidelity

// add counts one replayed operation o: prev is the thread's previous
// operation (nil for its first), waited the replay's time from prev's
// completion to o's start, took o's replayed time.
func (k *kindTimes) add(o, prev *op, waited, took time.Duration) {
	i := int(o.kind)
	if i >= maxKinds {
		i = 0
	}
	f := &k[i]
	f.Ops++
	f.ServiceNS += took.Nanoseconds()
	if o.end != 0 && o.end >= o.ts {
		f.RecordedServiceNS += int64(o.end - o.ts)
	}
	if prev != nil {
		f.WaitNS += waited.Nanoseconds()
		if from := prev.thinkFrom(); o.ts > from {
			f.RecordedThinkNS += int64(o.ts - from)
		}
	}
}

// fidelity sums the workers' tallies into one row per kind, in kind order.
func fidelity(workers []*worker) []KindFidelity {
	var sum kindTimes
	for _, w := range workers {
		for i := range w.kinds {
			a, b := &sum[i], &w.kinds[i]
			a.Ops += b.Ops
			a.RecordedServiceNS += b.RecordedServiceNS
			a.ServiceNS += b.ServiceNS
			a.RecordedThinkNS += b.RecordedThinkNS
			a.WaitNS += b.WaitNS
		}
	}
	var out []KindFidelity
	for i := range sum {
		if sum[i].Ops == 0 {
			continue
		}
		f := sum[i]
		f.Kind = formats.AccessKind(i).String()
		out = append(out, f)
	}
	return out
}

// medianFidelity is the per-kind median of each figure over runs.
func medianFidelity(runs []*Run) []KindFidelity {
	var kinds []string
	by := map[string][]KindFidelity{}
	for _, r := range runs {
		for _, f := range r.Fidelity {
			if _, ok := by[f.Kind]; !ok {
				kinds = append(kinds, f.Kind)
			}
			by[f.Kind] = append(by[f.Kind], f)
		}
	}
	var out []KindFidelity
	for _, k := range kinds {
		fs := by[k]
		med := func(get func(*KindFidelity) int64) int64 {
			xs := make([]float64, len(fs))
			for i := range fs {
				xs[i] = float64(get(&fs[i]))
			}
			return int64(spreadOf(xs).Median)
		}
		out = append(out, KindFidelity{Kind: k, Ops: fs[0].Ops,
			RecordedServiceNS: fs[0].RecordedServiceNS, RecordedThinkNS: fs[0].RecordedThinkNS,
			ServiceNS: med(func(f *KindFidelity) int64 { return f.ServiceNS }),
			WaitNS:    med(func(f *KindFidelity) int64 { return f.WaitNS })})
	}
	slices.SortStableFunc(out, func(a, b KindFidelity) int { return int(kindOrder(a.Kind)) - int(kindOrder(b.Kind)) })
	return out
}

func kindOrder(name string) formats.AccessKind {
	for k := formats.AccessKind(0); k < maxKinds; k++ {
		if k.String() == name {
			return k
		}
	}
	return maxKinds
}

// writeFidelity prints the baseline's per-kind comparison.
func writeFidelity(w io.Writer, fs []KindFidelity) {
	fmt.Fprintln(w, "\nRecorded against replayed, per kind (baseline, median over rounds):")
	pred := false
	for _, f := range fs {
		pred = pred || f.PredictedServiceNS != 0 || f.PredictedThinkNS != 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "kind\tops\tservice recorded\treplayed\tthink recorded\twaited\t"
	if pred {
		head += "service predicted\tthink predicted\t"
	}
	fmt.Fprintln(tw, head)
	var t KindFidelity
	row := func(f KindFidelity) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t", f.Kind, f.Ops, ms(float64(f.RecordedServiceNS)), ms(float64(f.ServiceNS)),
			ms(float64(f.RecordedThinkNS)), ms(float64(f.WaitNS)))
		if pred {
			fmt.Fprintf(tw, "%s\t%s\t", ms(float64(f.PredictedServiceNS)), ms(float64(f.PredictedThinkNS)))
		}
		fmt.Fprintln(tw)
	}
	for _, f := range fs {
		row(f)
		t.Ops += f.Ops
		t.RecordedServiceNS += f.RecordedServiceNS
		t.ServiceNS += f.ServiceNS
		t.RecordedThinkNS += f.RecordedThinkNS
		t.WaitNS += f.WaitNS
		t.PredictedServiceNS += f.PredictedServiceNS
		t.PredictedThinkNS += f.PredictedThinkNS
	}
	t.Kind = "all"
	row(t)
	tw.Flush()
}
