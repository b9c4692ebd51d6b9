package replay

import (
	"fmt"
	"sort"
	"strings"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate"
)

// ThisMachine is the device model of the measured development machine
// (docs/BENCHMARKS.md: ext4 on virtio-blk, about 70 µs QD1 4 KiB O_DIRECT
// read, 1 GB/s sequential, io_uring QD32 about 94K IOPS). Measure your own
// with 'predictio bench device' and pass it with --device-profile.
var ThisMachine = formats.DeviceProfile{
	Version:             formats.DeviceProfileVersion,
	Name:                "vda-default",
	ReadLatencyNS:       70_000,
	RandReadBytesPerSec: 94_000 * 4096,
	SeqReadBytesPerSec:  1e9,
	QueueDepth:          32,
}

// multiPolicy runs several policies as one, for "a+b" run specs.
type multiPolicy []policies.Policy

func (m multiPolicy) Accepts(k policies.EventKind) bool {
	for _, p := range m {
		if p.Accepts(k) {
			return true
		}
	}
	return false
}

func (m multiPolicy) Handle(ev *policies.Event, emit policies.Emit) {
	for _, p := range m {
		if p.Accepts(ev.Kind) {
			p.Handle(ev, emit)
		}
	}
}

// Predict runs simulate on the replayed accesses and hints with the same
// policies and fills Predicted in the summary: the page cache is the direct
// backend's --cache (without kernel readahead) or, for the page-cache
// backends, large enough for every file (with the readahead baseline). Its
// timeline is the replay's: recorded gaps divided by --speed, or no gaps
// with --timing asap.
func (r *Replayer) Predict(rep *Report, dev simulate.Device) error {
	var specs []string
	for _, s := range r.opt.Runs {
		if s != Baseline {
			specs = append(specs, s)
		}
	}
	if len(specs) == 0 {
		return nil
	}
	evs := r.events()
	ps := r.t.pageSize
	cfg := simulate.Config{PageSize: ps, Device: dev, Policies: specs}
	if r.opt.Backend == BackendDirect {
		c := r.opt.CachePages
		if c <= 0 {
			c = 65536
		}
		cfg.CacheBytes = int64(c) * int64(ps)
		cfg.NoReadahead = true
	} else {
		var total int64
		for _, f := range r.t.used() {
			total += int64(f.Size)
		}
		cfg.CacheBytes = max(2*total, 64<<20)
	}
	cfg.Env = r.policyEnv()
	cfg.Build = func(spec string, env policies.Env) (policies.Policy, error) {
		var m multiPolicy
		for _, one := range strings.Split(spec, "+") {
			if policies.SpecName(one) == "oracle" {
				if r.fut == nil {
					r.fut = r.t.future()
				}
				env.Future = r.fut
			}
			p, err := policies.Build(one, env)
			if err != nil {
				return nil, err
			}
			m = append(m, p)
		}
		if len(m) == 1 {
			return m[0], nil
		}
		return m, nil
	}
	// Give simulate the replay's timeline: recorded gaps divided by
	// --speed, or none at all (1 ns apart) with --timing asap.
	if len(evs) > 0 {
		t0 := evs[0].TS
		for i := range evs {
			switch {
			case r.opt.Timing == TimingASAP:
				evs[i].TS = t0 + uint64(i)
			case r.opt.Speed != 1:
				evs[i].TS = t0 + uint64(float64(evs[i].TS-t0)/r.opt.Speed)
			}
		}
	}
	sim, err := simulate.Run(cfg, &simulate.SliceSource{Events: evs})
	if err != nil {
		return fmt.Errorf("predict with simulate: %w", err)
	}
	base := sim.Lane(simulate.BaselineName)
	for i := range rep.Summary.Policies {
		p := &rep.Summary.Policies[i]
		if p.Policy == Baseline {
			p.Predicted = 1
			continue
		}
		for j := range sim.Policies {
			st := &sim.Policies[j]
			if st.Spec == p.Policy || (st.Name == p.Policy && st.Spec == "") {
				p.Predicted = st.Speedup
				rep.Summary.PredictedSpeedup = st.Speedup
			}
		}
	}
	ra := "with the readahead model"
	if cfg.NoReadahead {
		ra = "without readahead"
	}
	rep.Summary.Predictor = fmt.Sprintf("simulate, device %s (latency %.0f µs, %.0f MB/s, QD %d), cache %s %s; baseline stall %.1f ms",
		dev.Name, float64(dev.LatencyNS)/1e3, dev.BytesPerSec/1e6, dev.QueueDepth, simulate.FormatSize(cfg.CacheBytes), ra, float64(base.StallNS)/1e6)
	return nil
}

// events returns the replayed accesses and the hints as policy events in
// timestamp order, hints first on equal timestamps.
func (r *Replayer) events() []policies.Event {
	t := r.t
	evs := make([]policies.Event, 0, t.ops+len(t.hints))
	for _, h := range t.hints {
		var ev policies.Event
		if ev.FromHint(&h) {
			evs = append(evs, ev)
		}
	}
	for _, th := range t.threads {
		for _, o := range th.ops {
			evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: o.ts, PID: th.pid, TID: th.tid, File: t.files[o.file].ID,
				Access: policies.FileAccess{Kind: o.kind, Page: o.page, NPages: o.n}})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].TS != evs[j].TS {
			return evs[i].TS < evs[j].TS
		}
		return evs[i].Kind != policies.EventFileAccess && evs[j].Kind == policies.EventFileAccess
	})
	return evs
}
