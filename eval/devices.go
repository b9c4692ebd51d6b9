package eval

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
)

func init() { Register(devicesSuite{}) }

// devicesSuite is the paper's figures 15-17: one representative
// configuration of the launch, sqlite and llm suites on each device
// preset, every point under its own cgroup throttle, each against the
// same device's Baseline.
type devicesSuite struct{}

func (devicesSuite) Info() Info {
	return Info{
		Name: "devices", Figures: "15-17",
		Measures: "one configuration of launch (python3), sqlite (a 2^14-row YCSB scan) and llm (no-mmap load) on the device presets this, sata-ssd and hdd (cgroup read throttling), each against its own device's Baseline",
		Needs:    "cgroup v1 blkio throttling or cgroup v2 io.max; what the launch, sqlite and llm suites need",
		Expected: func(quick bool, _ harness.Preset) time.Duration {
			if quick {
				return time.Minute
			}
			return 3 * time.Hour
		},
		Paper: []PaperFigure{
			{Figure: "15", Caption: "Blender launch on NVMe, SATA SSD and HDD", Values: []string{"startup latency -8.7% to -10.1% on every device"}},
			{Figure: "16", Caption: "SQLite range scan on NVMe, SATA SSD and HDD", Values: []string{"2.64x on NVMe", "still beneficial on SATA SSD and HDD, the gain shrinking as the device slows"}},
			{Figure: "17", Caption: "LLM load on NVMe, SATA SSD and HDD", Values: []string{"about -10% to -11% on both SSDs", "little benefit on HDD (sequential-bandwidth bound)"}},
		},
		Plots: func(s *SuiteResult) []*Figure {
			return []*Figure{normalizedBars(s, "devices-normalized", "Across devices, normalized to each device's baseline (figures 15-17)", "wall time / Baseline", "wall_s", "baseline",
				[]string{"baseline", "noop", "predictio"})}
		},
	}
}

func (devicesSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	presets := []string{"this", "sata-ssd", "hdd"}
	if c.Quick {
		presets = []string{"this", "sata-ssd"}
	}
	lp, err := launchSuite{}.Plan(ctx, &Context{WorkDir: c.WorkDir, Quick: true, Rounds: c.Rounds, Device: c.Device, Predictio: c.Predictio, Log: c.Log})
	if err != nil {
		return nil, err
	}
	plan := &Plan{Notes: append([]string{"Each point runs under its own preset's throttle; its Baseline is on the same preset. " +
		"The launch part is the launch suite's python3 point."}, lp.Notes...)}
	var py *PointSpec
	for _, p := range lp.Points {
		if p.ID == "python3" {
			py = p
		}
	}
	for _, d := range presets {
		if py != nil {
			q := *py
			q.ID, q.Device = "launch-python3/"+d, d
			q.Params = map[string]string{"workload": "launch python3", "device": d}
			if d == "hdd" {
				q.Est = 20 * time.Second
			}
			plan.Points = append(plan.Points, &q)
		}
		for _, w := range []string{"sqlite-2^14", "llm-no-mmap"} {
			plan.Points = append(plan.Points, &PointSpec{ID: w + "/" + d, Device: d, Params: map[string]string{"workload": w, "device": d},
				NotRun: strings.Replace(needsWorkloads, "needs", fmt.Sprintf("the %s part needs", strings.SplitN(w, "-", 2)[0]), 1),
				Modes:  []ModeSpec{{Name: "baseline"}, {Name: "noop"}, {Name: "predictio"}}})
		}
	}
	return plan, nil
}
