package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/predictio/predictio/bench"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
	"github.com/predictio/predictio/simulate"
)

// simCLI runs predictio simulate in-process.
func simCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = runSimulate(commands["simulate"], args, &o, &e)
	return o.String(), e.String(), code
}

// simJSON runs predictio simulate --json with args in-process and decodes
// its report into v; a non-zero exit fails the test.
func simJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errOut, code := simCLI(t, append([]string{"--json"}, args...)...)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func trainCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = runTrain(commands["train"], args, &o, &e)
	return o.String(), e.String(), code
}

func synthBundle(t *testing.T, spec formats.SynthSpec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), spec.Pattern)
	if err := formats.Synth(dir, spec); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSimulateCLI(t *testing.T) {
	bt := synthBundle(t, formats.SynthSpec{Pattern: "btree", Events: 5000})

	t.Run("table", func(t *testing.T) {
		out, errOut, code := simCLI(t, "--policy", "tree", "--cache", "64MiB", bt)
		if code != 0 {
			t.Fatalf("code %d: %s", code, errOut)
		}
		for _, want := range []string{"baseline", "tree", "oracle", "coverage", "speedup"} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("json", func(t *testing.T) {
		out, errOut, code := simCLI(t, "--json", "--policy", "tree", bt)
		if code != 0 {
			t.Fatalf("code %d: %s", code, errOut)
		}
		var r struct {
			Events       uint64  `json:"events"`
			EventsPerSec float64 `json:"events_per_sec"`
			Policies     []map[string]any
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if r.Events == 0 || r.EventsPerSec <= 0 || len(r.Policies) != 3 || r.Policies[1]["name"] != "tree" {
			t.Errorf("report %+v", r)
		}
		for i, p := range r.Policies {
			for _, k := range []string{"name", "coverage", "accuracy", "pages_used_in_time", "pages_late", "pages_wasted", "io_amplification", "stall_ns", "wall_ns", "speedup"} {
				if _, ok := p[k]; !ok {
					t.Errorf("policy %d lacks %q", i, k)
				}
			}
			// Scalars, present for every lane, the baseline included.
			for _, k := range []string{"predicted_wall_ns", "predicted_speedup"} {
				if v, ok := p[k].(float64); !ok || v <= 0 {
					t.Errorf("policy %d: %s is %v, want a positive number", i, k, p[k])
				}
			}
		}
	})

	t.Run("oracle once", func(t *testing.T) {
		out, errOut, code := simCLI(t, "--json", "--policy", "oracle", bt)
		if code != 0 {
			t.Fatalf("code %d: %s", code, errOut)
		}
		var r struct{ Policies []struct{ Name string } }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Policies) != 2 || r.Policies[1].Name != "oracle" {
			t.Errorf("simulate --policy oracle: lanes %+v, want baseline and one oracle", r.Policies)
		}
	})

	t.Run("this machine", func(t *testing.T) {
		t.Setenv(bench.ProfileCacheEnv, t.TempDir())
		type report struct {
			Calibrated bool     `json:"predicted_calibrated"`
			Notes      []string `json:"notes"`
			RA         string   `json:"readahead_params"`
			Device     simulate.Device
		}
		run := func(args ...string) report {
			t.Helper()
			var r report
			simJSON(t, &r, append(args, bt)...)
			return r
		}
		// No profile cached: uncalibrated, and the report says how to
		// calibrate.
		r := run()
		if r.Calibrated || !strings.Contains(strings.Join(r.Notes, "\n"), "uncalibrated") {
			t.Errorf("no cached profile: calibrated %v, notes %q", r.Calibrated, r.Notes)
		}
		if r2 := run("--device", "hdd"); r2.Calibrated || r2.Device.Name != "hdd" || r2.RA != "" {
			t.Errorf("--device hdd: %+v; want the preset, uncalibrated, without this machine's readahead", r2)
		}
		dev, err := bench.DeviceOf("/var/tmp")
		if err != nil {
			t.Skipf("/var/tmp is not on a block device here (%v): no profile to cache", err)
		}
		if !strings.Contains(r.RA, "read_ahead_kb") {
			t.Errorf("readahead parameters %q, want this machine's device's", r.RA)
		}
		p := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: dev.Name, ReadLatencyNS: 61_000, SeqReadBytesPerSec: 1.2e9,
			QueueDepth: 32, MeasuredAt: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), Kernel: kernelRelease()} // latency 61 µs less a 4 KiB transfer: 57586 ns
		if _, err := bench.SaveProfile(p, "/var/tmp"); err != nil {
			t.Fatal(err)
		}
		r = run()
		if !r.Calibrated || r.Device.Name != dev.Name || r.Device.LatencyNS != 57586 || !strings.Contains(r.Device.Source, "measured 2026-11-30") {
			t.Errorf("cached profile: %+v; want the cached figures of %s, calibrated", r, dev)
		}
	})

	t.Run("assert", func(t *testing.T) {
		junit := filepath.Join(t.TempDir(), "junit.xml")
		_, errOut, code := simCLI(t, "--policy", "tree", "--assert", "tree.coverage>=0.5", "--assert", "tree.coverage>=1.5", "--junit", junit, bt)
		if code != 1 {
			t.Errorf("failing assertion: code %d, want 1", code)
		}
		if !strings.Contains(errOut, "tree.coverage>=1.5") || strings.Contains(errOut, "tree.coverage>=0.5") {
			t.Errorf("stderr must name the failing expression only:\n%s", errOut)
		}
		b, err := os.ReadFile(junit)
		if err != nil {
			t.Fatal(err)
		}
		var suites struct {
			Suites []struct {
				Tests    int `xml:"tests,attr"`
				Failures int `xml:"failures,attr"`
			} `xml:"testsuite"`
		}
		if err := xml.Unmarshal(b, &suites); err != nil || len(suites.Suites) != 1 || suites.Suites[0].Failures != 1 || suites.Suites[0].Tests != 5 {
			t.Errorf("junit %+v %v:\n%s", suites, err, b)
		}
		if _, _, code := simCLI(t, "--policy", "tree", "--assert", "tree.coverage>=0.5", bt); code != 0 {
			t.Errorf("passing assertion: code %d", code)
		}
		_, errOut, code = simCLI(t, "--assert", "nosuch.coverage>=0.5", bt)
		if code != 1 || !strings.Contains(errOut, "nosuch") {
			t.Errorf("assertion on a missing policy: code %d\n%s", code, errOut)
		}
	})

	t.Run("sweep and plot", func(t *testing.T) {
		dir := t.TempDir()
		png1, svg := filepath.Join(dir, "curve.png"), filepath.Join(dir, "curve.svg")
		out, errOut, code := simCLI(t, "--policy", "tree", "--sweep", "cache=64KiB,1MiB,64MiB", "--plot", png1, bt)
		if code != 0 {
			t.Fatalf("code %d: %s", code, errOut)
		}
		if !strings.Contains(out, "curve:") || !strings.Contains(out, "64KiB") || !strings.Contains(out, "64MiB") {
			t.Errorf("sweep output:\n%s", out)
		}
		f, err := os.Open(png1)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 400 {
			t.Errorf("png: %v %v", err, img)
		}
		_, errOut, code = simCLI(t, "--policy", "tree", "--sweep", "cache=64KiB,64MiB", "--assert", "tree.coverage>=0.9", bt)
		if code != 1 || !strings.Contains(errOut, "tree.coverage>=0.9 [cache 64KiB]") || strings.Contains(errOut, "[cache 64MiB]") {
			t.Errorf("sweep assertion: code %d\n%s", code, errOut)
		}
		if _, errOut, code := simCLI(t, "--sweep", "cache=1MiB,4MiB", "--plot", svg, "--json", bt); code != 0 {
			t.Fatalf("svg: code %d %s", code, errOut)
		}
		if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("svg: %v", err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{}, 2, "BUNDLE"},
			{[]string{"--bogus", bt}, 2, "bogus"},
			{[]string{"--cache", "lots", bt}, 2, "--cache"},
			{[]string{"--cache", "0", bt}, 2, "--cache"},
			{[]string{"--cache-model", "arc", bt}, 2, "--cache-model"},
			{[]string{"--device", "floppy", bt}, 2, "floppy"},
			{[]string{"--assert", "tree.coverage", bt}, 2, "--assert"},
			{[]string{"--sweep", "ram=1GiB", bt}, 2, "--sweep"},
			{[]string{"--plot", "x.jpg", bt}, 2, "--plot"},
			{[]string{"--policy", "nosuch", bt}, 1, "nosuch"},
			{[]string{"--policy", "tree:window=x", bt}, 1, "window"},
			{[]string{"--policy", "markov", bt}, 1, "--model"},
			{[]string{filepath.Join(t.TempDir(), "missing")}, 1, "missing"},
			{[]string{"--model", filepath.Join(t.TempDir(), "none.model"), bt}, 1, "none.model"},
			{[]string{"--device-profile", filepath.Join(t.TempDir(), "dev.json"), bt}, 1, "dev.json"},
			{[]string{"--file-rates", "fast", bt}, 2, "--file-rates"},
			{[]string{"--file-rates", "recorded", "--device", "nvme", bt}, 2, "--file-rates recorded and --device"},
		} {
			_, errOut, code := simCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("simulate %q: code %d, want %d; stderr must name %q:\n%s", tc.args, code, tc.code, tc.want, errOut)
			}
		}
		// A bundle whose accesses table is garbage.
		bad := synthBundle(t, formats.SynthSpec{Pattern: "seq", Events: 1000})
		if err := os.WriteFile(filepath.Join(bad, formats.AccessesFile), []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := simCLI(t, bad)
		if code != 1 || !strings.Contains(errOut, "accesses") {
			t.Errorf("corrupt bundle: code %d\n%s", code, errOut)
		}
	})

	t.Run("device profile", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "dev.json")
		b, _ := json.Marshal(formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 70000, SeqReadBytesPerSec: 1e9, RandReadBytesPerSec: 4e8, QueueDepth: 32})
		os.WriteFile(p, b, 0o644)
		out, errOut, code := simCLI(t, "--device-profile", p, bt)
		if code != 0 || !strings.Contains(out, "device vda") {
			t.Errorf("code %d\n%s%s", code, out, errOut)
		}
		// File rates: a synthetic bundle was not recorded here, and has
		// no cold operation to fit them on.
		for _, tc := range []struct{ mode, want string }{
			{"auto", "the bundle was recorded on synth"},
			{"recorded", "no cold read or fault"},
		} {
			var rep struct {
				Notes     []string        `json:"notes"`
				FileRates json.RawMessage `json:"file_rates"`
			}
			simJSON(t, &rep, "--device-profile", p, "--file-rates", tc.mode, bt)
			if rep.FileRates != nil || !strings.Contains(strings.Join(rep.Notes, "; "), tc.want) {
				t.Errorf("--file-rates %s: file_rates %s, notes %q; want none, and a note naming %q", tc.mode, rep.FileRates, rep.Notes, tc.want)
			}
		}
		// A recording made here, whose 20 cold reads took twice the
		// profile's 70 µs: by default (auto) the file rates scale the
		// device; --file-rates profile turns them off.
		here := formats.HostInfo()
		var rows []formats.Access
		for i := range uint64(20) {
			ts, page := 1e9+i*200_000, i*10_007 // far apart: no readahead between them
			rows = append(rows,
				formats.Access{TS: ts + 1000, PID: 1, TID: 1, FileID: 1, FirstPage: page, NPages: 1, Kind: formats.KindCacheAdd},
				formats.Access{TS: ts, EndNS: ts + 140_000, Op: i + 1, Ret: 4096, PID: 1, TID: 1, FileID: 1, FirstPage: page, NPages: 1, Kind: formats.KindRead})
		}
		local := tracetest.ServiceBundle(t, func(m *formats.Manifest) { m.Host = here },
			[]formats.File{{ID: 1, Dev: 0xfc00000, Ino: 12, Path: "/a", Size: 1 << 30, Mode: 0o100644}}, rows, nil)
		var walls [2]int64
		for i, mode := range []string{"auto", "profile"} {
			var rep struct {
				FileRates *struct {
					Latency float64 `json:"latency"`
				} `json:"file_rates"`
				Policies []simulate.Stats `json:"policies"`
			}
			simJSON(t, &rep, "--device-profile", p, "--file-rates", mode, "--no-oracle", local)
			if (rep.FileRates != nil) != (mode == "auto") || mode == "auto" && (rep.FileRates.Latency < 1.8 || rep.FileRates.Latency > 2.2) {
				t.Errorf("--file-rates %s on a recording made here: file_rates %+v; want a latency scale of about 2 with auto, none with profile", mode, rep.FileRates)
			}
			walls[i] = rep.Policies[0].WallNS
		}
		if walls[0] < walls[1]+20*50_000 {
			t.Errorf("the baseline's wall %d ns with the file rates, %d ns without; want the 20 reads' doubled latency in it (about 1.4 ms more)", walls[0], walls[1])
		}
		os.WriteFile(p, []byte(`{"version":1,"read_latency_ns":0}`), 0o644)
		_, errOut, code = simCLI(t, "--device-profile", p, bt)
		if code != 1 || !strings.Contains(errOut, "read_latency_ns") {
			t.Errorf("bad profile: code %d\n%s", code, errOut)
		}
	})

	t.Run("help", func(t *testing.T) {
		out, _, code := simCLI(t, "--policy", "help")
		if code != 0 || !strings.Contains(out, "window") || !strings.Contains(out, "depth") {
			t.Errorf("policy help: code %d\n%s", code, out)
		}
		_, errOut, code := simCLI(t, "-h")
		if code != 0 || !strings.Contains(errOut, "Example:") {
			t.Errorf("-h: code %d\n%s", code, errOut)
		}
	})
}

func TestTrainCLI(t *testing.T) {
	dir := t.TempDir()
	var runs []string
	for r := 0; r < 4; r++ {
		runs = append(runs, synthBundle(t, formats.SynthSpec{Pattern: "sparse", Events: 3000, Run: r}))
	}
	model := filepath.Join(dir, "launch.model")
	out, errOut, code := trainCLI(t, append([]string{"markov", "-o", model, "--holdout", "1"}, runs...)...)
	if code != 0 {
		t.Fatalf("train: code %d\n%s", code, errOut)
	}
	if !strings.Contains(out, "from 3 runs") || !strings.Contains(out, "holdout") || !strings.Contains(out, "markov") {
		t.Errorf("train output:\n%s", out)
	}
	out, errOut, code = trainCLI(t, append([]string{"markov", "-o", model, "--holdout", "1", "--json"}, runs...)...)
	var js struct {
		Runs    []map[string]any `json:"runs"`
		States  int              `json:"states"`
		Reports []struct {
			Policies []struct {
				Name     string  `json:"name"`
				Coverage float64 `json:"coverage"`
			} `json:"policies"`
		} `json:"holdout_reports"`
	}
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || len(js.Runs) != 3 || js.States == 0 || len(js.Reports) != 1 {
		t.Fatalf("train --json: code %d err %v\n%s%s", code, err, out, errOut)
	}
	if p := js.Reports[0].Policies; len(p) != 3 || p[1].Name != "markov" || p[1].Coverage <= 0 {
		t.Errorf("holdout report %+v", p)
	}
	// The model drives simulate, and markov beats the baseline.
	out, errOut, code = simCLI(t, "--json", "--model", model, "--policy", "markov", "--assert", "markov.coverage>=0.3", runs[3])
	if code != 0 {
		t.Fatalf("simulate with model: code %d\n%s%s", code, out, errOut)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 2, "Usage"},
		{[]string{"lstm", "-o", model, runs[0]}, 2, "lstm"},
		{[]string{"markov", runs[0]}, 2, "-o"},
		{[]string{"markov", "-o", model}, 2, "BUNDLE"},
		{[]string{"markov", "-o", model, "--holdout", "2", runs[0], runs[1]}, 2, "--holdout"},
		{[]string{"markov", "-o", model, filepath.Join(dir, "missing")}, 1, "missing"},
		{[]string{"markov", "-o", filepath.Join(dir, "no", "such", "dir", "m"), runs[0]}, 1, "save model"},
	} {
		_, errOut, code := trainCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("train %q: code %d, want %d; stderr must name %q:\n%s", tc.args, code, tc.code, tc.want, errOut)
		}
	}
	// A corrupt model is refused by simulate with the file named.
	bad := filepath.Join(dir, "bad.model")
	os.WriteFile(bad, []byte("PIOMARKV\x09\x00\x00\x00"), 0o644)
	_, errOut, code = simCLI(t, "--model", bad, "--policy", "markov", runs[3])
	if code != 1 || !strings.Contains(errOut, "bad.model") || !strings.Contains(errOut, "version") {
		t.Errorf("corrupt model: code %d\n%s", code, errOut)
	}
}

// TestSimulateUntraced runs simulate --untraced on a bundle that carries
// the recorder's cost and on one that does not.
func TestSimulateUntraced(t *testing.T) {
	var rows []formats.Access
	for i := range 40 {
		ts := uint64(1000 + i*20000)
		rows = append(rows, formats.Access{TS: ts, EndNS: ts + 1000, FileID: 1, FirstPage: uint64(i * 64), NPages: 1, Kind: formats.KindRead,
			Op: ts, PID: 3, TID: 4, TracerNS: 4000, TracerCalls: 2})
	}
	dir := tracetest.CostBundle(t, 64<<20, rows, nil)
	type report struct {
		Untraced   bool     `json:"untraced"`
		UntracedNS uint64   `json:"untraced_ns"`
		Notes      []string `json:"notes"`
		Policies   []struct {
			Name   string `json:"name"`
			WallNS int64  `json:"wall_ns"`
		}
	}
	run := func(args ...string) report {
		t.Helper()
		var r report
		simJSON(t, &r, append(append([]string{"--device", "nvme"}, args...), dir)...)
		return r
	}
	plain, un := run(), run("--untraced")
	if plain.Untraced || !un.Untraced || un.UntracedNS != 40*5000 || !strings.Contains(strings.Join(un.Notes, "\n"), "untraced") {
		t.Errorf("untraced %v (%d ns), notes %q; without the flag %v", un.Untraced, un.UntracedNS, un.Notes, plain.Untraced)
	}
	for i := range un.Policies {
		if d := plain.Policies[i].WallNS - un.Policies[i].WallNS; d <= 0 || d > int64(un.UntracedNS) {
			t.Errorf("%s: wall %d ns, untraced %d: want it shorter by at most %d", un.Policies[i].Name, plain.Policies[i].WallNS, un.Policies[i].WallNS, un.UntracedNS)
		}
	}

	old := synthBundle(t, formats.SynthSpec{Pattern: "btree", Events: 500})
	_, errOut, code := simCLI(t, "--untraced", "--device", "nvme", old)
	if code != 1 || !strings.Contains(errOut, "no recorder cost") || !strings.Contains(errOut, "without --untraced") {
		t.Errorf("a bundle without the recorder's cost: code %d, %q", code, errOut)
	}
}
