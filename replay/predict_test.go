package replay

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/simulate"
)

// TestPredictEveryPolicy: the predicted column gives every run spec, a
// lone baseline included, a scalar predicted_wall_ns and
// predicted_speedup, and summary.predicted_calibrated says whether the
// device was measured. It needs no replay: Predict simulates the bundle.
func TestPredictEveryPolicy(t *testing.T) {
	bundle, root := synthBundle(t, formats.SynthSpec{Pattern: "sparse", Events: 2000, Files: 1, FilePages: 16384, ThinkNS: 20000})
	for _, tc := range []struct {
		runs       []string
		calibrated bool
	}{
		{[]string{Baseline}, false},
		{[]string{Baseline, "oracle:n=256"}, true},
		{[]string{"oracle"}, false},
	} {
		r, err := New(bundle, Options{Root: root, Backend: BackendKernel, Runs: tc.runs})
		if err != nil {
			t.Fatal(err)
		}
		rep := &Report{}
		rep.summarize(tc.runs)
		pred := Prediction{Device: simulate.Presets["nvme"], Calibrated: tc.calibrated}
		if err := r.Predict(rep, pred); err != nil {
			t.Fatal(err)
		}
		if len(rep.Summary.Policies) != len(tc.runs) {
			t.Fatalf("%q: %d summary policies", tc.runs, len(rep.Summary.Policies))
		}
		var buf bytes.Buffer
		if err := rep.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		var js struct {
			Summary struct {
				Calibrated *bool `json:"predicted_calibrated"`
				Policies   []map[string]any
			}
		}
		if err := json.Unmarshal(buf.Bytes(), &js); err != nil {
			t.Fatal(err)
		}
		if js.Summary.Calibrated == nil || *js.Summary.Calibrated != tc.calibrated {
			t.Errorf("%q: summary.predicted_calibrated %v, want %v", tc.runs, js.Summary.Calibrated, tc.calibrated)
		}
		for _, p := range js.Summary.Policies {
			w, ok1 := p["predicted_wall_ns"].(float64)
			s, ok2 := p["predicted_speedup"].(float64)
			if !ok1 || !ok2 || w <= 0 || s <= 0 {
				t.Errorf("%q: policy %v: predicted_wall_ns %v, predicted_speedup %v; want positive numbers", tc.runs, p["policy"], p["predicted_wall_ns"], p["predicted_speedup"])
			}
			if p["policy"] == Baseline && s != 1 {
				t.Errorf("%q: baseline predicted speedup %v, want 1", tc.runs, s)
			}
		}
		if len(tc.runs) == 2 {
			b, o := rep.Summary.Policies[0], rep.Summary.Policies[1]
			if o.Predicted != b.PredictedWallNS/o.PredictedWallNS || o.Predicted <= 1 {
				t.Errorf("oracle predicted speedup %v, want baseline wall %v over its wall %v, above 1", o.Predicted, b.PredictedWallNS, o.PredictedWallNS)
			}
		}
	}
}

// TestPredictWithServiceTimes: the predicted column simulates the
// replayed operations with their recorded completions, mappings and ops,
// as replay replays them: with service times a thread's think time is
// the gap after the previous operation completed (here 2 of each 10 ms),
// not the whole gap (which holds the recorded service time too), and an
// executable mapping's fault takes the exec readahead path.
func TestPredictWithServiceTimes(t *testing.T) {
	const n = 40
	const gap, service = 10_000_000, 8_000_000
	files := []formats.File{{ID: 1, Dev: 1, Ino: 1, Path: "/data/a.bin", Size: 4096 * 4096, MtimeNS: mtime, Mode: formats.ModeRegular | 0o644}}
	var rows []formats.Access
	for i := 0; i < n; i++ {
		ts := uint64(1_000_000_000 + i*gap)
		rows = append(rows, formats.Access{TS: ts, EndNS: ts + service, PID: 1, TID: 1, FileID: 1, FirstPage: uint64(i * 64), NPages: 1,
			Kind: formats.KindFault, Op: uint64(i + 1), Prot: formats.ProtRead | formats.ProtExec, MapPages: 4096})
	}
	bundle, root := bundle11(t, files, rows, true)
	r, err := New(bundle, Options{Root: root, Backend: BackendKernel})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range r.events() {
		if a := ev.Access; a.End == 0 || a.Op == 0 || a.Prot&formats.ProtExec == 0 || a.MapPages != 4096 {
			t.Fatalf("simulated access %+v lacks its completion, op or mapping", a)
		}
	}
	rep := &Report{}
	rep.summarize([]string{Baseline})
	rep.Summary.Fidelity = []KindFidelity{{Kind: "fault", Ops: n}, {Kind: "open"}}
	if err := r.Predict(rep, simulateDevice(t)); err != nil {
		t.Fatal(err)
	}
	wall := rep.Summary.Policies[0].PredictedWallNS
	// Per kind, the prediction sits beside the measurement: the faults'
	// modelled service and think time add up to the wall less the first
	// fault's start; a kind the model did not see has none.
	f, o := rep.Summary.Fidelity[0], rep.Summary.Fidelity[1]
	if got := float64(f.PredictedServiceNS + f.PredictedThinkNS); f.PredictedThinkNS != (n-1)*(gap-service) || got > wall || got < wall-float64(service) {
		t.Errorf("faults predicted: service %d ns, think %d ns; want think %d and the two about the wall %.0f ns", f.PredictedServiceNS, f.PredictedThinkNS, (n-1)*(gap-service), wall)
	}
	if o.PredictedServiceNS != 0 || o.PredictedThinkNS != 0 {
		t.Errorf("a kind the bundle does not have was predicted: %+v", o)
	}
	// 39 think times of 2 ms and 40 simulated faults of well under 2 ms
	// each on the nvme preset; the recorded gaps alone are 390 ms.
	if think := float64((n - 1) * (gap - service)); wall < think || wall > 1.5*think {
		t.Errorf("predicted baseline wall %.1f ms; want about the %.0f ms of think time (%s)", wall/1e6, think/1e6, rep.Summary.Predictor)
	}
	if strings.Contains(rep.Summary.Predictor, "lack service times") {
		t.Errorf("predictor: %s", rep.Summary.Predictor)
	}
}

// TestPredictHostByBackend: the host model's prefetch costs are the kernel
// backend's: with them the kernel backend's oracle is predicted slower
// than without, and for the direct backend they are left out, which the
// predictor says.
func TestPredictHostByBackend(t *testing.T) {
	bundle, root := synthBundle(t, formats.SynthSpec{Pattern: "sparse", Events: 4000, Files: 1, FilePages: 1 << 20, ThinkNS: 1000})
	host := &simulate.Host{Issue: []simulate.IssueCost{{Pages: 1, NS: 20_000}}, IssueCachedNS: 1000,
		IssueBusy: 1, Slowdown: 1}
	predict := func(backend string, h *simulate.Host) *Report {
		r, err := New(bundle, Options{Root: root, Backend: backend, Runs: []string{Baseline, "oracle"}})
		if err != nil {
			t.Fatal(err)
		}
		rep := &Report{}
		rep.summarize(r.opt.Runs)
		dev := simulate.Presets["nvme"]
		dev.Host = h
		if err := r.Predict(rep, Prediction{Device: dev, Calibrated: true}); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	wall := func(rep *Report) float64 { return rep.Summary.Policies[1].PredictedWallNS }
	withRep, withoutRep := predict(BackendKernel, host), predict(BackendKernel, nil)
	if with, without := wall(withRep), wall(withoutRep); with < 1.5*without {
		t.Errorf("kernel backend: oracle predicted %.0f ns with 20 µs requests, %.0f without; want much slower", with, without)
	}
	// The modelled backend's time: about 20 µs for each of the oracle's
	// requests, none without the host model or for the baseline.
	if busy := withRep.Summary.Policies[1].PredictedBackendBusyNS; busy < 3000*20_000 {
		t.Errorf("kernel backend: predicted backend busy %.0f ns, want at least 3000 requests × 20 µs", busy)
	}
	if b, n := withRep.Summary.Policies[0].PredictedBackendBusyNS, withoutRep.Summary.Policies[1].PredictedBackendBusyNS; b != 0 || n != 0 {
		t.Errorf("predicted backend busy %.0f ns for the baseline, %.0f without the host model; want 0 and 0", b, n)
	}
	d := predict(BackendDirect, host)
	if wall(d) != wall(predict(BackendDirect, nil)) || !strings.Contains(d.Summary.Predictor, "direct backend's CPU costs are not modelled") {
		t.Errorf("direct backend: predicted %.0f ns; predictor %q", wall(d), d.Summary.Predictor)
	}
}

// TestPredictFileRates: the predicted column scales the device by the
// file rates it is given when the replay reads the recorded files, and
// leaves them out under --root, whose files are others.
func TestPredictFileRates(t *testing.T) {
	const n = 40
	files := []formats.File{{ID: 1, Dev: 1, Ino: 1, Path: "/data/a.bin", Size: 4096 * 4096, MtimeNS: mtime, Mode: formats.ModeRegular | 0o644}}
	var rows []formats.Access
	for i := range n {
		ts := uint64(1_000_000_000 + i*1_000_000)
		rows = append(rows, formats.Access{TS: ts, EndNS: ts + 500_000, PID: 1, TID: 1, FileID: 1, FirstPage: uint64(i * 64), NPages: 1,
			Kind: formats.KindRead, Op: uint64(i + 1), Ret: 4096})
	}
	bundle, root := bundle11(t, files, rows, true)
	r, err := New(bundle, Options{Root: root, Backend: BackendKernel})
	if err != nil {
		t.Fatal(err)
	}
	wall := func(rates *simulate.FileRates) float64 {
		rep := &Report{}
		rep.summarize([]string{Baseline})
		pred := simulateDevice(t)
		pred.FileRates = rates
		if err := r.Predict(rep, pred); err != nil {
			t.Fatal(err)
		}
		return rep.Summary.Policies[0].PredictedWallNS
	}
	slow := &simulate.FileRates{Latency: 3, Transfer: 1}
	plain := wall(nil)
	if got := wall(slow); got != plain {
		t.Errorf("under --root the file rates changed the prediction: %.0f ns against %.0f", got, plain)
	}
	r.opt.Root = "" // as if replayed at the recorded paths
	// 40 demand reads whose latency (about 96 µs on the nvme preset)
	// triples: about 7.7 ms more.
	if got := wall(slow); got < plain+5e6 {
		t.Errorf("at the recorded paths the file rates' latency ×3 gave %.0f ns against %.0f without; want about 7.7 ms more", got, plain)
	}
}
