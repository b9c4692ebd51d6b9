package eval

import (
	"fmt"
	"io"
	"time"

	"github.com/predictio/predictio/bench"
	"github.com/predictio/predictio/internal/harness"
)

// ThrottleNote is what the report says about device emulation.
const ThrottleNote = "Slower devices are emulated with cgroup I/O throttling on the workload's own disk " +
	"(cgroup v2 io.max where the io controller exists, else cgroup v1 blkio.throttle.read_iops_device and read_bps_device). " +
	"Throttling limits rates; it adds no latency at queue depth 1: a request that finds the rate budget free is as fast as on the real device, " +
	"so the HDD preset has an HDD's throughput but not its seek time. " +
	"Kernel threads, such as the PredictIO kernel module's workers (--backend kmod), are in no cgroup of ours and bypass the throttle; " +
	"the kernel backend's fadvise and readahead calls run in the runtime's own threads and are throttled."

// setupDevice creates the throttle for the preset on the work directory's
// disk and, unless told not to, measures the device under it with the
// code of `predictio bench device`.
func (x *runner) setupDevice(p harness.Preset) error {
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
	x.throttle = t
	x.res.Device.Throttle = t.String()
	x.res.Device.Mechanism = t.Mechanism
	x.res.Device.Disk = t.Device + " (" + t.DevName + ")"
	switch {
	case x.o.NoDeviceCheck:
		x.res.Device.CheckNote = "not measured: --no-device-check"
	case x.res.Device.Check != nil:
		x.res.Device.CheckNote = "measured by an earlier run into this directory"
		x.ctx.Profile = x.res.Device.Profile
	default:
		x.checkDevice(p)
	}
	return nil
}

// checkDevice runs bench device's measurement under the throttle: QD1
// latency, QD32 4 KiB random reads, sequential 1 MiB reads.
func (x *runner) checkDevice(p harness.Preset) {
	size, dur := int64(1<<30), 9*time.Second
	if x.o.Quick {
		size, dur = 256<<20, 1500*time.Millisecond
	}
	x.prog.logf("eval: measuring device preset %s with bench device (%v on a %d MiB scratch file)", p.Name, dur, size>>20)
	scratch := x.ctx.workPath("device-check.dat")
	// Fill the scratch file before throttling: only reads are limited,
	// but its probe read would count.
	if err := bench.PrepareScratch(scratch, size, io.Discard); err != nil {
		x.res.Device.CheckNote = "not measured: " + err.Error()
		return
	}
	if err := x.enter(); err != nil {
		x.res.Device.CheckNote = "not measured: " + err.Error()
		return
	}
	prof, err := bench.MeasureDevice(bench.DeviceConfig{Path: scratch, Size: size, Duration: dur})
	if lerr := x.leave(); lerr != nil && err == nil {
		err = lerr
	}
	if err != nil {
		x.res.Device.CheckNote = "not measured: " + err.Error()
		return
	}
	c := &DeviceCheck{
		QD1LatencyUS: float64(prof.ReadLatencyNS) / 1e3, RandReadIOPS: prof.RandReadIOPS,
		RandReadMiBs: prof.RandReadBytesPerSec / (1 << 20), SeqReadMiBs: prof.SeqReadBytesPerSec / (1 << 20),
		DurationS: dur.Seconds(), MeasuredAtUnix: time.Now().Unix(),
	}
	c.WithinLimits = within(c.RandReadIOPS, p.ReadIOPS) && within(prof.SeqReadBytesPerSec, p.ReadBPS)
	x.res.Device.Check = c
	x.ctx.Profile = prof
	x.res.Device.Profile = prof
	x.prog.logf("eval: device %s: QD1 %.0f µs, QD32 %.0f IOPS (%.1f MiB/s), sequential %.0f MiB/s; within the preset's limits: %v",
		p.Name, c.QD1LatencyUS, c.RandReadIOPS, c.RandReadMiBs, c.SeqReadMiBs, c.WithinLimits)
}

// within reports whether a measured rate respects a limit (0: none), with
// 10% for the throttle's time slices.
func within(v float64, limit uint64) bool {
	return limit == 0 || v <= 1.1*float64(limit)
}

func (x *runner) enter() error {
	if x.throttle == nil {
		return nil
	}
	return x.throttle.Enter()
}

func (x *runner) leave() error {
	if x.throttle == nil {
		return nil
	}
	return x.throttle.Leave()
}
