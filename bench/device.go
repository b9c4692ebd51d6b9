package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/predictio/predictio/engine"
	"github.com/predictio/predictio/formats"
	"golang.org/x/sys/unix"
)

// DeviceConfig configures MeasureDevice.
type DeviceConfig struct {
	Path     string        // scratch file on the device
	Size     int64         // its size (at least 64 MiB)
	Duration time.Duration // total; each of the four device phases gets a quarter, then the host
	Name     string        // profile name; default: the block device's name
	Log      io.Writer
	// Host, when set, are the host's costs to put in the profile instead
	// of measuring them (MeasureHost). A caller measuring a throttled
	// device measures them once without the throttle: a throttle slows
	// the device, not the CPUs, and under one the uncached reads the host
	// phase times differ by noise of the throttle's time slices.
	Host *formats.HostCosts
}

// Sequential phase parameters: 1 MiB requests, 4 in flight (4 MiB of
// buffers, inside the default 8 MiB RLIMIT_MEMLOCK).
const (
	seqBlock = 1 << 20
	seqQD    = 4
)

// MeasureDevice measures a device profile with the io_uring engine and
// O_DIRECT: QD1 4 KiB random-read latency, 4 KiB random-read bandwidth at
// QD 32, the curves between, sequential read bandwidth with 1 MiB
// requests, and the latency after the device idled (idleCurve, about 1 s
// whatever c.Duration); then the host's costs (MeasureHost, sized to the
// device's measured rate), unless c.Host gives them. Each of the first
// four phases runs for a fixed time, so that a slow or throttled device
// takes as long as a fast one; ctx is checked between phases and their steps,
// and a cancelled measurement returns ctx's error.
func MeasureDevice(ctx context.Context, c DeviceConfig) (*formats.DeviceProfile, error) {
	if c.Duration < 3*time.Millisecond {
		return nil, fmt.Errorf("measure device: duration %v is too short", c.Duration)
	}
	if c.Size < 64<<20 {
		return nil, fmt.Errorf("measure device: size %d is below 64 MiB", c.Size)
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if err := PrepareScratch(c.Path, c.Size, c.Log); err != nil {
		return nil, err
	}
	prof, err := measurePhases(ctx, c)
	if err != nil {
		return nil, err
	}
	prof.Host = c.Host
	if c.Host != nil {
		fmt.Fprintf(c.Log, "6/6: the host: given, not measured\n")
	} else {
		fmt.Fprintf(c.Log, "6/6: the host: cached and uncached reads, opens and prefetches through the kernel backend (about 7 s on this machine's disk) ...\n")
		if prof.Host, err = MeasureHost(ctx, HostConfig{Path: c.Path, Size: c.Size, IOPS: prof.RandReadIOPS, Log: c.Log}); err != nil {
			return nil, err
		}
	}
	prof.Name = c.Name
	if prof.Name == "" {
		prof.Name = strings.TrimPrefix(prof.Device, "/dev/")
	}
	if prof.Name == "" {
		prof.Name = "device"
	}
	return prof, nil
}

// measurePhases runs MeasureDevice's four device phases, a quarter of
// c.Duration each, and returns the profile without its host costs.
func measurePhases(ctx context.Context, c DeviceConfig) (*formats.DeviceProfile, error) {
	phase := c.Duration / 4
	fmt.Fprintf(c.Log, "reading the scratch file once, so that a virtual disk's host has it cached in every phase ...\n")
	n, rate, err := warmHost(c.Path, c.Size)
	if err != nil {
		return nil, fmt.Errorf("read the scratch file once: %w", err)
	}
	fmt.Fprintf(c.Log, "read %d MiB at %.1f MiB/s\n", n>>20, rate/(1<<20))
	p := Point{Path: c.Path, Size: c.Size, Backend: Uring, RW: "randread", Threads: 1, Duration: phase,
		FixedBufs: true, RegisterFiles: true}
	p.QD = 1
	fmt.Fprintf(c.Log, "1/6: QD1 4 KiB random reads for %v ...\n", phase)
	lat, err := runStep(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("measure device latency: %w", err)
	}
	fmt.Fprintf(c.Log, "QD1 4 KiB random read: p50 %.1f us, p99 %.1f us (%.0f IOPS)\n", lat.P50us, lat.P99us, lat.IOPS)
	p.QD = 32
	fmt.Fprintf(c.Log, "2/6: QD32 4 KiB random reads for %v ...\n", phase)
	bw, err := runStep(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("measure device random bandwidth: %w", err)
	}
	fmt.Fprintf(c.Log, "QD32 4 KiB random read: %.0f IOPS, %.1f MiB/s\n", bw.IOPS, bw.MiBs)
	each := phase / time.Duration(len(curveDepths)+len(syncThreads))
	fmt.Fprintf(c.Log, "3/6: 4 KiB random reads at QD %v, then from %v threads of pread, %v each ...\n", curveDepths, syncThreads, each)
	queue, err := queueCurve(ctx, p, each, lat, bw, c.Log)
	if err != nil {
		return nil, err
	}
	syncQueue, err := syncCurve(ctx, p, each, c.Log)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.Log, "4/6: sequential 1 MiB reads for %v ...\n", phase)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("measure device sequential bandwidth: %w", err)
	}
	seq, err := seqRead(c.Path, c.Size, phase)
	if err != nil {
		return nil, fmt.Errorf("measure device sequential bandwidth: %w", err)
	}
	fmt.Fprintf(c.Log, "sequential read, 1 MiB x %d: %.1f MiB/s\n", seqQD, seq/(1<<20))
	fmt.Fprintf(c.Log, "5/6: QD1 4 KiB reads after the device idled %v, alternated, %d each ...\n", idleGaps, idleRounds*idleRun)
	idle, err := idleCurve(ctx, c.Path, c.Size)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.Log, "after idle: %s\n", idleSummary(idle))
	abs, _ := filepath.Abs(c.Path)
	return &formats.DeviceProfile{
		Version: formats.DeviceProfileVersion, Device: blockDevice(c.Path), Path: abs, Kernel: kernel(),
		MeasuredAt:          time.Now().UTC().Truncate(time.Second),
		ReadLatencyNS:       uint64(lat.P50us * 1e3),
		ReadLatencyP99NS:    uint64(lat.P99us * 1e3),
		RandReadBytesPerSec: bw.IOPS * BlockSize,
		RandReadIOPS:        bw.IOPS,
		SeqReadBytesPerSec:  seq,
		QueueDepth:          32,
		Queue:               queue,
		SyncQueue:           syncQueue,
		Idle:                idle,
		SeqBlockSize:        seqBlock,
		SeqQueueDepth:       seqQD,
		Engine:              "io_uring O_DIRECT (predictio engine, fixed buffers and files)",
		PhaseSeconds:        phase.Seconds(),
	}, nil
}

// runStep runs p until its time is up or ctx is done, and fails with
// ctx's error in the second case.
func runStep(ctx context.Context, p Point) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	p.Stop = ctx.Done()
	r, err := Run(p)
	if cerr := ctx.Err(); cerr != nil {
		return Result{}, cerr
	}
	return r, err
}

// curveDepths are the queue depths measured between QD1 and QD32.
var curveDepths = []int{2, 4, 8, 16}

// syncThreads are the thread counts of the synchronous curve.
var syncThreads = []int{1, 2, 4, 8}

// syncCurve measures 4 KiB random reads from each of syncThreads threads
// of pread(2) (O_DIRECT), d each.
func syncCurve(ctx context.Context, p Point, d time.Duration, log io.Writer) ([]formats.QueuePoint, error) {
	p.Backend, p.QD, p.Duration, p.FixedBufs, p.RegisterFiles = Psync, 1, d, false, false
	return measureCurve(ctx, p, syncThreads, func(p *Point, n int) { p.Threads = n }, "%d threads of 4 KiB preads", log)
}

// queueCurve measures 4 KiB random reads at each of curveDepths, d each,
// and returns the curve from QD1 to QD32 with the two points measured
// before (lat at QD1, bw at QD32).
func queueCurve(ctx context.Context, p Point, d time.Duration, lat, bw Result, log io.Writer) ([]formats.QueuePoint, error) {
	p.Duration = d
	mid, err := measureCurve(ctx, p, curveDepths, func(p *Point, qd int) { p.QD = qd }, "QD%d 4 KiB random read", log)
	if err != nil {
		return nil, err
	}
	return append(append([]formats.QueuePoint{queuePoint(1, lat)}, mid...), queuePoint(32, bw)), nil
}

// measureCurve runs p once for each n of ns, set applying n to it, and
// returns a curve point (QD n) of each; what names a point in the log and
// in errors.
func measureCurve(ctx context.Context, p Point, ns []int, set func(*Point, int), what string, log io.Writer) ([]formats.QueuePoint, error) {
	var out []formats.QueuePoint
	for _, n := range ns {
		set(&p, n)
		r, err := runStep(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("measure device, %s: %w", fmt.Sprintf(what, n), err)
		}
		fmt.Fprintf(log, "%s: %.0f IOPS, p50 %.1f us\n", fmt.Sprintf(what, n), r.IOPS, r.P50us)
		out = append(out, queuePoint(n, r))
	}
	return out, nil
}

// queuePoint is the curve point of depth qd measured by r.
func queuePoint(qd int, r Result) formats.QueuePoint {
	return formats.QueuePoint{QD: qd, IOPS: r.IOPS, P50NS: uint64(r.P50us * 1e3)}
}

// seqRead reads the file sequentially (wrapping around) for d and returns
// bytes per second.
func seqRead(path string, size int64, d time.Duration) (float64, error) {
	_, rate, err := seqPass(path, size, d, false)
	return rate, err
}

// warmHost reads the scratch file once, sequentially with O_DIRECT,
// before the timed phases, and returns the bytes read and their rate. A
// virtual disk's host caches the disk image, and drop_caches in the guest
// cannot reach that cache: a scratch file written in an earlier session
// and since evicted there answered the QD1 phase in 247 us (p50) where the
// later phases, once their reads had warmed it, answered in 43-49 us,
// and the profile predicted a fio replay 40% too slow. After one pass
// every phase sees the disk as the fidelity runs see their programs'
// files (after an untraced run first). On a real device the pass costs
// its few seconds and changes nothing.
func warmHost(path string, size int64) (int64, float64, error) {
	return seqPass(path, size, 0, true)
}

// seqPass reads the file sequentially in seqBlock requests at seqQD,
// wrapping around until d has passed, or (whole) once from start to end,
// and returns the bytes read and bytes per second.
func seqPass(path string, size int64, d time.Duration, whole bool) (int64, float64, error) {
	if _, err := EnsureCold(path, size); err != nil {
		return 0, 0, err
	}
	f, err := engine.OpenDirect(path, os.O_RDONLY)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var bytes atomic.Int64
	var firstErr error
	e, err := engine.New([]*os.File{f}, engine.WithQueueDepth(seqQD), engine.WithBufferSize(seqBlock),
		engine.WithHandler(func(c *engine.Completion) {
			if c.Err != nil && firstErr == nil {
				firstErr = c.Err
			}
			bytes.Add(int64(c.Res))
		}))
	if err != nil {
		return 0, 0, err
	}
	defer e.Close()
	w := e.Worker(0)
	chunks := size / seqBlock
	deadline := time.Now().Add(d)
	more := func(i int64) bool {
		if whole {
			return i < chunks
		}
		return i < seqQD || time.Now().Before(deadline)
	}
	t0 := time.Now()
	for i := int64(0); firstErr == nil && more(i); i++ {
		if err := w.Submit(engine.Request{Op: engine.OpRead, Off: (i % chunks) * seqBlock, Len: seqBlock}); err != nil {
			return 0, 0, err
		}
	}
	if err := w.Drain(); err != nil {
		return 0, 0, err
	}
	if firstErr != nil {
		return 0, 0, firstErr
	}
	n := bytes.Load()
	return n, float64(n) / time.Since(t0).Seconds(), nil
}

// blockDevice names the block device holding path ("/dev/vda"), or "".
func blockDevice(path string) string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return ""
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "DEVNAME="); ok {
			return "/dev/" + v
		}
	}
	return ""
}
