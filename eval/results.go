package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/harness"
)

// Schema is the value of results.json's "schema" key; docs/eval.md
// documents every field.
const Schema = "predictio-eval/1"

// Point and suite statuses.
const (
	StatusOK      = "ok"      // measured
	StatusPartial = "partial" // some modes or points measured, some not run
	StatusNotRun  = "not_run" // could not run: Reason says what it needs
	StatusFailed  = "failed"  // ran and failed: Reason has the error
)

// Results is results.json: everything one eval directory holds, across
// reruns (a rerun resumes it).
type Results struct {
	Schema   string          `json:"schema"`
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Machine  harness.Machine `json:"machine"`
	Device   DeviceInfo      `json:"device"`
	// OtherDevices are the presets that points of the devices suite ran
	// under besides Device, with their checks.
	OtherDevices []*DeviceInfo  `json:"other_devices,omitempty"`
	Quick        bool           `json:"quick"`
	Rounds       int            `json:"rounds"` // requested; 0 means each suite's default
	Policies     []string       `json:"policies,omitempty"`
	Suites       []*SuiteResult `json:"suites"`
}

// DeviceInfo is the emulated device of the run and its verification.
type DeviceInfo struct {
	Preset harness.Preset `json:"preset"`
	// Throttle describes the mechanism and the cgroup ("" when
	// unthrottled).
	Throttle  string `json:"throttle"`
	Mechanism string `json:"mechanism"`
	Disk      string `json:"disk"` // MAJ:MIN and name of the workload's disk
	// Check is the `predictio bench device` measurement under the preset
	// (nil when it was not run, with CheckNote saying why).
	Check     *DeviceCheck `json:"check,omitempty"`
	CheckNote string       `json:"check_note,omitempty"`
	// Profile is the full bench device profile behind Check.
	Profile *formats.DeviceProfile `json:"profile,omitempty"`
}

// DeviceCheck is what bench device measured under the preset.
type DeviceCheck struct {
	QD1LatencyUS   float64 `json:"qd1_latency_us"`   // median QD1 4 KiB random read
	RandReadIOPS   float64 `json:"randread_iops"`    // 4 KiB random reads at QD 32
	RandReadMiBs   float64 `json:"randread_mib_s"`   // the same in MiB/s
	SeqReadMiBs    float64 `json:"seqread_mib_s"`    // 1 MiB reads, 4 in flight
	WithinLimits   bool    `json:"within_limits"`    // no rate above the preset's limits (+10%)
	DurationS      float64 `json:"duration_s"`       // measurement time
	MeasuredAtUnix int64   `json:"measured_at_unix"` // when
}

// SuiteResult is one suite: its description, status and points.
type SuiteResult struct {
	Name      string   `json:"name"`
	Figures   string   `json:"figures"` // the paper's figures it reproduces, e.g. "7-9"
	Measures  string   `json:"measures"`
	Needs     string   `json:"needs"`
	ExpectedS float64  `json:"expected_s"` // the expected time of this run
	ElapsedS  float64  `json:"elapsed_s"`
	Status    string   `json:"status"`
	Reason    string   `json:"reason,omitempty"`
	Notes     []string `json:"notes,omitempty"`
	Points    []*Point `json:"points"`
}

// Point is one x value of a figure (a run length, a scan, a workload),
// measured in every mode.
type Point struct {
	Suite  string            `json:"suite"`
	ID     string            `json:"id"`
	Params map[string]string `json:"params,omitempty"`
	Status string            `json:"status"`
	Reason string            `json:"reason,omitempty"`
	Quick  bool              `json:"quick"`
	// Rounds is the number of rounds each mode ran.
	Rounds int `json:"rounds"`
	// ColdVerified is true when every run of every mode started with none
	// of the workload's pages cached (checked, not assumed); Cold says how
	// or why not ("not applicable" for in-memory microbenchmarks).
	ColdVerified bool   `json:"cold_verified"`
	Cold         string `json:"cold"`
	// Where and with what it was measured.
	Hostname     string        `json:"hostname"`
	Kernel       string        `json:"kernel"`
	DevicePreset string        `json:"device_preset"`
	Commit       string        `json:"commit"`
	FinishedAt   time.Time     `json:"finished_at"`
	Modes        []*ModeResult `json:"modes"`
}

// ModeResult is one mode (baseline, noop, a policy) of a point.
type ModeResult struct {
	Mode   string `json:"mode"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Rounds int    `json:"rounds"`
	// ColdVerified and Cold as for Point, for this mode's runs; Cold is
	// the check of the run with the most resident pages.
	ColdVerified bool               `json:"cold_verified"`
	Cold         *harness.ColdCheck `json:"cold,omitempty"`
	// Metrics holds one summary per metric over the rounds; the name ends
	// in its unit (_s, _us, _per_s) or is a fraction or a ratio.
	Metrics map[string]harness.Summary `json:"metrics"`
	// Notes carries what a run reported besides numbers.
	Notes []string `json:"notes,omitempty"`
}

// Mode returns the mode named name, or nil.
func (p *Point) Mode(name string) *ModeResult {
	for _, m := range p.Modes {
		if m.Mode == name {
			return m
		}
	}
	return nil
}

// Suite returns the suite named name, or nil.
func (r *Results) Suite(name string) *SuiteResult {
	for _, s := range r.Suites {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// pointKey identifies a point across reruns: a rerun with the same device
// and quickness skips it once it is ok.
func pointKey(suite, id, device string, quick bool) string {
	return fmt.Sprintf("%s|%s|%s|%v", suite, id, device, quick)
}

// LoadResults reads DIR/results.json; a missing file gives nil, nil.
func LoadResults(dir string) (*Results, error) {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read results %s: %w; move it away to start afresh", filepath.Join(dir, "results.json"), err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("read results %s: schema %q, want %q; move it away to start afresh", filepath.Join(dir, "results.json"), r.Schema, Schema)
	}
	return &r, nil
}

// Save writes DIR/results.json atomically.
func (r *Results) Save(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return writeAtomic(filepath.Join(dir, "results.json"), append(b, '\n'))
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
