package replay

import (
	"bytes"
	"encoding/json"
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
