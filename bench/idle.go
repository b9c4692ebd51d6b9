package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/predictio/predictio/engine"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/rawsys"
	"golang.org/x/sys/unix"
)

// idleGaps are the idle times before a read that the idle curve measures.
// On this project's virtual machine (virtio-blk, 2026-12-06) a 4 KiB read
// took 50 µs back to back, 93-98 µs after 0.2 ms of quiet, 195-214 µs
// after 5 ms and 256-285 µs after 30 ms: the idle CPUs and the host's I/O
// path go to sleep, and a program that computes between its reads waits
// for them to wake on each.
var idleGaps = []time.Duration{0, 100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond}

// Each of idleRounds rounds reads idleWarm+idleRun times at each gap, in
// a shuffled order of gaps, so that a drift of the device spreads over
// all of them; the last idleRun of each run are measured.
const (
	idleRounds = 4
	idleWarm   = 2
	idleRun    = 4
)

// idleCurve measures the median latency of QD1 4 KiB O_DIRECT random
// reads (pread(2)) after each of idleGaps of no I/O from this process,
// and the median gap each really had (a sleep overshoots). Its reads are
// those of a thread that waits for each (the synchronous path), from
// one OS thread with a timer slack of 1 ns.
func idleCurve(ctx context.Context, path string, size int64) ([]formats.IdlePoint, error) {
	f, err := engine.OpenDirect(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0) // back to the thread's default

	buf, err := unix.Mmap(-1, 0, BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("measure idle curve: map a buffer: %w", err)
	}
	defer unix.Munmap(buf)
	blocks := size / BlockSize
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	lat := make([][]float64, len(idleGaps))
	gap := make([][]float64, len(idleGaps))
	last := time.Now()
	for range idleRounds {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("measure idle curve: %w", err)
		}
		for _, i := range rng.Perm(len(idleGaps)) {
			// A run of reads at one gap: the host's wake-up state adapts
			// to the recent gaps, so the first reads of a run are not
			// measured.
			for k := range idleWarm + idleRun {
				if d := idleGaps[i] - time.Since(last); d > 0 {
					rawsys.Sleep(d)
				}
				off := rng.Int64N(blocks) * BlockSize
				t0 := time.Now()
				if err := rawPread(int(f.Fd()), buf, off); err != nil {
					return nil, fmt.Errorf("measure idle curve: read %s at %d: %w", path, off, err)
				}
				end := time.Now()
				if k >= idleWarm {
					lat[i] = append(lat[i], float64(end.Sub(t0)))
					gap[i] = append(gap[i], float64(t0.Sub(last)))
				}
				last = end
			}
		}
	}
	pts := make([]formats.IdlePoint, len(idleGaps))
	for i := range idleGaps {
		pts[i] = formats.IdlePoint{GapNS: uint64(median(gap[i])), P50NS: uint64(median(lat[i]))}
	}
	slices.SortFunc(pts, func(a, b formats.IdlePoint) int { return int(int64(a.GapNS) - int64(b.GapNS)) })
	return pts, nil
}

// idleSummary is the idle curve as "44 µs after 0.0 ms, ...".
func idleSummary(pts []formats.IdlePoint) string {
	var b []byte
	for i, p := range pts {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%.0f µs after %.1f ms", float64(p.P50NS)/1e3, float64(p.GapNS)/1e6)
	}
	return string(b)
}

// rawPread is a whole pread(2) without telling the Go scheduler
// (internal/rawsys; the idle curve sleeps with rawsys.Sleep too): a
// blocking system call wakes the runtime's monitor thread, which then
// polls every 20 µs and keeps the CPU from idling as a C program's would.
// Measured 2026-12-06: with the runtime's wrappers a read after 1 ms of
// quiet took 50-62 µs, as a Python loop's took 77-103 µs; without them
// ... (docs/device-profile.md).
func rawPread(fd int, b []byte, off int64) error {
	n, err := rawsys.Pread(fd, b, off)
	switch {
	case err != nil:
		return err
	case n != len(b):
		return fmt.Errorf("short read: %d of %d bytes", n, len(b))
	}
	return nil
}
