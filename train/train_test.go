package train

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate"
	"github.com/predictio/predictio/simulate/simtest"
)

// launch is a recurring sparse startup sequence: 20 pages of a 4096-page
// binary, never adjacent, never page 0, so readahead sees standalone
// random reads and reads one page each.
var launch = []uint64{3000, 120, 2500, 800, 1700, 64, 3900, 450, 2200, 1300, 3500, 900, 2800, 200, 1900, 3300, 600, 2600, 1500, 4000}

// launchRun writes one run: the launch sequence 1 ms apart, plus one
// run-specific noise page of a second file. mtime is the binary's mtime.
func launchRun(t *testing.T, run int, mtime int64) string {
	b := &simtest.Bundle{Files: []formats.File{
		{ID: 1, Path: "/app/bin/app", Size: 4096 * 4096, MtimeNS: mtime, Dev: 1, Ino: 10},
		{ID: 2, Path: "/app/lib/noise.so", Size: 1024 * 4096, MtimeNS: 5, Dev: 1, Ino: 11},
		{ID: 3, Size: 1024 * 4096}, // unresolved path: not trainable
	}}
	ts := b.Reads(1, 1e9, 1_000_000, launch...)
	ts = b.Reads(2, ts, 1_000_000, uint64(100+run*50))
	b.Reads(3, ts, 1_000_000, 7, 300)
	return simtest.Write(t, fmt.Sprintf("run%d", run), b)
}

func holdoutConfig() simulate.Config {
	return simulate.Config{CacheBytes: 256 << 20, Device: simulate.Presets["nvme"], Oracle: true}
}

// TestGoldenMarkovLearnsLaunch: trained on 3 runs, the model predicts the
// whole sequence from its first page on the 4th: the baseline misses all
// 20 launch pages, markov only the first: 19 of the 20 launch misses are
// removed. The noise page and the two pages of the file without a path
// miss in both lanes, so overall coverage is 19/23.
func TestGoldenMarkovLearnsLaunch(t *testing.T) {
	var dirs []string
	for r := 0; r < 4; r++ {
		dirs = append(dirs, launchRun(t, r, 1000))
	}
	var warnings []string
	hr, err := Holdout(dirs, 1, "markov", holdoutConfig(), func(m string) { warnings = append(warnings, m) })
	if err != nil {
		t.Fatal(err)
	}
	if len(hr.Train.Runs) != 3 || hr.Train.Model.Runs != 3 {
		t.Fatalf("trained on %d runs (model says %d), want 3", len(hr.Train.Runs), hr.Train.Model.Runs)
	}
	for _, r := range hr.Train.Runs {
		if r.Files != 2 || r.Skipped != 1 || r.Demand != 23 {
			t.Errorf("run %+v: want 2 files, 1 skipped, 23 demand accesses", r)
		}
	}
	rep := hr.Reports[0]
	base, mk := rep.Lane(simulate.BaselineName), rep.Lane("markov")
	if base.Misses != 23 {
		t.Errorf("baseline misses %d, want 23", base.Misses)
	}
	if mk.Misses != 4 || mk.Prefetched != 19 || mk.Used != 19 || mk.Late != 0 {
		t.Errorf("markov: %+v; want 4 misses (first launch page, noise, 2 unresolved), 19 prefetched and used", *mk)
	}
	if want := 19.0 / 23; mk.Coverage != want || mk.Accuracy != 1 {
		t.Errorf("markov coverage %v accuracy %v, want %v 1", mk.Coverage, mk.Accuracy, want)
	}
	if len(warnings) != 0 {
		t.Errorf("unexpected warnings: %q", warnings)
	}
	// The launch binary's model: one state per page but the last, each
	// with one certain transition.
	fm, err := hr.Train.Model.Lookup(policies.FileKey{Path: "/app/bin/app", Size: 4096 * 4096, MtimeNS: 1000})
	if err != nil || fm == nil || fm.States() != len(launch)-1 {
		t.Fatalf("model of /app/bin/app: %v, %v", fm, err)
	}
	if tr := fm.Next(launch[0]); len(tr) != 1 || tr[0].Next != launch[1] || tr[0].P != 1 {
		t.Errorf("transitions from %d: %+v", launch[0], tr)
	}
}

// TestChangedBinaryIsIgnored: a 4th run whose binary has a new mtime gets
// no prediction and a warning naming the file.
func TestChangedBinaryIsIgnored(t *testing.T) {
	dirs := []string{launchRun(t, 0, 1000), launchRun(t, 1, 1000), launchRun(t, 2, 1000), launchRun(t, 3, 2000)}
	var warnings []string
	hr, err := Holdout(dirs, 1, "markov", holdoutConfig(), func(m string) { warnings = append(warnings, m) })
	if err != nil {
		t.Fatal(err)
	}
	if mk := hr.Reports[0].Lane("markov"); mk.Prefetched != 0 || mk.Coverage != 0 {
		t.Errorf("markov applied a stale model: %+v", *mk)
	}
	if len(warnings) == 0 || !strings.Contains(strings.Join(warnings, "\n"), "/app/bin/app") {
		t.Errorf("warnings %q, want one naming /app/bin/app", warnings)
	}
}

// TestChangedBetweenTrainingRuns: runs of two versions of the binary train
// the newest only, with a warning.
func TestChangedBetweenTrainingRuns(t *testing.T) {
	dirs := []string{launchRun(t, 0, 1000), launchRun(t, 1, 2000), launchRun(t, 2, 2000)}
	res, err := Markov(dirs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "/app/bin/app") {
		t.Errorf("warnings %q", res.Warnings)
	}
	if _, err := res.Model.Lookup(policies.FileKey{Path: "/app/bin/app", Size: 4096 * 4096, MtimeNS: 2000}); err != nil {
		t.Errorf("newest version: %v", err)
	}
	if _, err := res.Model.Lookup(policies.FileKey{Path: "/app/bin/app", Size: 4096 * 4096, MtimeNS: 1000}); err == nil {
		t.Errorf("old version accepted")
	}
}

func TestModelRoundTrip(t *testing.T) {
	res, err := Markov([]string{launchRun(t, 0, 1000), launchRun(t, 1, 1000)})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := res.Model.Save(&buf); err != nil {
		t.Fatal(err)
	}
	m, err := policies.Load(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(m.Files()), len(res.Model.Files()); got != want || m.Runs != 2 {
		t.Errorf("loaded %d files %d runs, want %d and 2", got, m.Runs, want)
	}
	// A flipped byte is caught.
	b := buf.Bytes()
	b[len(b)/2] ^= 0xff
	if _, err := policies.Load(bytes.NewReader(b)); err == nil {
		t.Errorf("corrupt model loaded")
	}
}

func TestTrainErrors(t *testing.T) {
	if _, err := Markov(nil); err == nil {
		t.Error("no bundles: no error")
	}
	missing := t.TempDir() + "/nope"
	if _, err := Markov([]string{missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing bundle: err %v, want one naming %s", err, missing)
	}
	d := launchRun(t, 0, 1)
	if _, err := Holdout([]string{d}, 1, "", holdoutConfig(), nil); err == nil || !strings.Contains(err.Error(), "holdout") {
		t.Errorf("holdout of all runs: err %v", err)
	}
}

// TestMapRowsTrainMarkov: a launch recorded as fault-around map rows (an
// mmap'd binary) trains the same model as one recorded as reads, because
// map rows are demand (policies.IsDemand), as replay re-issues them. The
// numbers are those of TestGoldenMarkovLearnsLaunch: map rows trigger no
// readahead, so the baseline misses all 23 pages and markov removes 19.
func TestMapRowsTrainMarkov(t *testing.T) {
	var dirs []string
	for r := 0; r < 4; r++ {
		sb := &simtest.Bundle{Files: []formats.File{
			{ID: 1, Path: "/app/bin/app", Size: 4096 * 4096, MtimeNS: 1000, Dev: 1, Ino: 10},
			{ID: 2, Path: "/app/lib/noise.so", Size: 1024 * 4096, MtimeNS: 5, Dev: 1, Ino: 11},
			{ID: 3, Size: 1024 * 4096},
		}}
		ts := sb.Reads(1, 1e9, 1_000_000, launch...)
		ts = sb.Reads(2, ts, 1_000_000, uint64(100+r*50))
		sb.Reads(3, ts, 1_000_000, 7, 300)
		for i := range sb.Accesses {
			sb.Accesses[i].Kind = formats.KindMap
		}
		dirs = append(dirs, simtest.Write(t, fmt.Sprintf("maprun%d", r), sb))
	}
	hr, err := Holdout(dirs, 1, "markov", holdoutConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range hr.Train.Runs {
		if r.Demand != 23 {
			t.Errorf("run %+v: want 23 demand accesses (the map rows)", r)
		}
	}
	rep := hr.Reports[0]
	base, mk := rep.Lane(simulate.BaselineName), rep.Lane("markov")
	if base.Misses != 23 || mk.Misses != 4 || mk.Used != 19 {
		t.Errorf("baseline misses %d, markov %+v; want 23, and 4 misses with 19 prefetches used", base.Misses, *mk)
	}
	if fm, err := hr.Train.Model.Lookup(policies.FileKey{Path: "/app/bin/app", Size: 4096 * 4096, MtimeNS: 1000}); err != nil || fm == nil || fm.States() != len(launch)-1 {
		t.Fatalf("model of /app/bin/app: %v, %v", fm, err)
	}
}
