package eval

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/predictio/predictio/bench"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/harness"
)

// ThrottleNote is what the report says about device emulation.
const ThrottleNote = "Slower devices are emulated with cgroup I/O throttling on the workload's own disk " +
	"(cgroup v2 io.max where the io controller exists, else cgroup v1 blkio.throttle.read_iops_device and read_bps_device). " +
	"Throttling limits rates; it adds no latency at queue depth 1: a request that finds the rate budget free is as fast as on the real device, " +
	"so the HDD preset has an HDD's throughput but not its seek time. " +
	"Kernel threads, such as the PredictIO kernel module's workers (--backend kmod), are in no cgroup of ours and bypass the throttle; " +
	"the kernel backend's fadvise and readahead calls run in the runtime's own threads and are throttled. " +
	"The device check's host costs (the CPU's cost of a cached read, an open, a prefetch request) are measured once without the throttle, " +
	"which slows the device, not the CPUs."

// setupDevice creates the throttle for the preset on the work directory's
// disk and, unless told not to, measures the device under it with the
// code of `predictio bench device`.
func (x *runner) setupDevice(ctx context.Context, p harness.Preset) error {
	t, err := harness.NewThrottle(p, x.o.WorkDir)
	if err != nil {
		if p.Throttled() {
			return fmt.Errorf("run eval: device preset %s: %w", p.Name, err)
		}
		// Unthrottled runs need no cgroup; say what we could not learn.
		x.res.Device.Mechanism, x.res.Device.Throttle = "none", "unthrottled"
		x.res.Device.Disk = "unknown: " + err.Error()
		return nil
	}
	x.throttle, x.cur = t, t
	x.res.Device.Throttle = t.String()
	x.res.Device.Mechanism = t.Mechanism
	x.res.Device.Disk = t.Device + " (" + t.DevName + ")"
	switch {
	case x.o.NoDeviceCheck:
		x.res.Device.CheckNote = "not measured: --no-device-check"
	case x.res.Device.Check != nil:
		x.res.Device.CheckNote = "measured by an earlier run into this directory"
		x.ctx.Profile = x.res.Device.Profile
		if x.ctx.Profile != nil && !p.Throttled() {
			x.host = x.ctx.Profile.Host
		}
	default:
		x.checkDevice(ctx, p)
	}
	return nil
}

// checkDevice measures the run's preset under its throttle.
func (x *runner) checkDevice(ctx context.Context, p harness.Preset) {
	c, prof, note := x.measure(ctx, p)
	x.res.Device.Check, x.res.Device.Profile, x.res.Device.CheckNote = c, prof, note
	x.ctx.Profile = prof
}

// measure runs bench device's measurement under the current throttle:
// QD1 latency, QD32 4 KiB random reads, sequential 1 MiB reads; the host
// costs without it (hostCosts). On failure, or when ctx is cancelled, it
// returns a note saying why.
func (x *runner) measure(ctx context.Context, p harness.Preset) (*DeviceCheck, *formats.DeviceProfile, string) {
	size, dur := int64(1<<30), 9*time.Second
	if x.o.Quick {
		// A throttle lets a burst of one time slice (100 ms of its rate)
		// through at a phase's start: a throttled preset's phases stay
		// long enough for that to stay inside within's 10%.
		size = 256 << 20
		if !p.Throttled() {
			dur = 1500 * time.Millisecond
		}
	}
	x.prog.logf("eval: measuring device preset %s with bench device (%v on a %d MiB scratch file)", p.Name, dur, size>>20)
	scratch := x.ctx.workPath("device-check.dat")
	// Fill the scratch file before throttling: only reads are limited,
	// but its probe read would count.
	if err := bench.PrepareScratch(scratch, size, io.Discard); err != nil {
		return nil, nil, "not measured: " + err.Error()
	}
	var host *formats.HostCosts
	if p.Throttled() {
		h, err := x.hostCosts(ctx, scratch, size)
		if err != nil {
			return nil, nil, "not measured: " + err.Error()
		}
		host = h
	}
	if err := x.enter(); err != nil {
		return nil, nil, "not measured: " + err.Error()
	}
	prof, err := bench.MeasureDevice(ctx, bench.DeviceConfig{Path: scratch, Size: size, Duration: dur, Host: host})
	if lerr := x.leave(); lerr != nil && err == nil {
		err = lerr
	}
	if err != nil {
		return nil, nil, "not measured: " + err.Error()
	}
	if host == nil {
		x.host = prof.Host
	}
	c := &DeviceCheck{
		QD1LatencyUS: float64(prof.ReadLatencyNS) / 1e3, RandReadIOPS: prof.RandReadIOPS,
		RandReadMiBs: prof.RandReadBytesPerSec / (1 << 20), SeqReadMiBs: prof.SeqReadBytesPerSec / (1 << 20),
		DurationS: dur.Seconds(), MeasuredAtUnix: time.Now().Unix(),
	}
	c.WithinLimits = within(c.RandReadIOPS, p.ReadIOPS) && within(prof.SeqReadBytesPerSec, p.ReadBPS)
	x.prog.logf("eval: device %s: QD1 %.0f µs, QD32 %.0f IOPS (%.1f MiB/s), sequential %.0f MiB/s; within the preset's limits: %v",
		p.Name, c.QD1LatencyUS, c.RandReadIOPS, c.RandReadMiBs, c.SeqReadMiBs, c.WithinLimits)
	return c, prof, ""
}

// hostCosts returns the host's costs, measured on the scratch file
// without a throttle on first use, or taken from the unthrottled device
// check.
func (x *runner) hostCosts(ctx context.Context, scratch string, size int64) (*formats.HostCosts, error) {
	if x.host != nil {
		return x.host, nil
	}
	x.prog.logf("eval: measuring the host's costs without a throttle")
	if _, err := bench.EnsureCold(scratch, size); err != nil {
		return nil, err
	}
	h, err := bench.MeasureHost(ctx, bench.HostConfig{Path: scratch, Size: size})
	if err != nil {
		return nil, err
	}
	x.host = h
	return h, nil
}

// within reports whether a measured rate respects a limit (0: none), with
// 10% for the throttle's time slices.
func within(v float64, limit uint64) bool {
	return limit == 0 || v <= 1.1*float64(limit)
}

func (x *runner) enter() error {
	if x.cur == nil {
		return nil
	}
	return x.cur.Enter()
}

func (x *runner) leave() error {
	if x.cur == nil {
		return nil
	}
	return x.cur.Leave()
}

// usePreset makes the throttle of ps's own device preset current (made,
// and measured with bench device, on first use).
func (x *runner) usePreset(ctx context.Context, ps *PointSpec) error {
	x.cur = x.throttle
	if ps.Device == "" || ps.Device == x.ctx.Device.Name {
		return nil
	}
	if t, ok := x.others[ps.Device]; ok {
		x.cur = t
		return nil
	}
	p, err := harness.PresetByName(ps.Device)
	if err != nil {
		return err
	}
	t, err := harness.NewThrottle(p, x.o.WorkDir)
	if err != nil {
		return fmt.Errorf("device preset %s: %w", p.Name, err)
	}
	x.others[p.Name] = t
	info := x.otherDevice(p)
	info.Throttle, info.Mechanism, info.Disk = t.String(), t.Mechanism, t.Device+" ("+t.DevName+")"
	x.cur = t
	if info.Check == nil && !x.o.NoDeviceCheck {
		c, prof, note := x.measure(ctx, p)
		info.Check, info.Profile, info.CheckNote = c, prof, note
	}
	return nil
}

// otherDevice returns the results entry of another preset, made on first
// use (a resumed run keeps its earlier check).
func (x *runner) otherDevice(p harness.Preset) *DeviceInfo {
	for _, d := range x.res.OtherDevices {
		if d.Preset.Name == p.Name {
			return d
		}
	}
	d := &DeviceInfo{Preset: p}
	x.res.OtherDevices = append(x.res.OtherDevices, d)
	return d
}
