package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/predictio/predictio/engine"
	"github.com/predictio/predictio/formats"
	"golang.org/x/sys/unix"
)

// idleGaps are the idle times before a read that the idle curve measures.
// On this project's virtual machine (virtio-blk, 2026-12-06) a 4 KiB read
// after 0.1 ms of idle took 44 µs, after 0.2 ms 77 µs, after 5 ms 100 µs
// and after 30 ms 232 µs: the host's I/O path goes to sleep while the
// disk idles, and a program that computes between its reads waits for it
// to wake on each.
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
func idleCurve(ctx context.Context, path string, size int64, log io.Writer) ([]formats.IdlePoint, error) {
	f, err := engine.OpenDirect(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0) // back to the thread's default

	buf := alignedBuf(BlockSize)
	blocks := size / BlockSize
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	lat := make([][]int64, len(idleGaps))
	gap := make([][]int64, len(idleGaps))
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
					ts := unix.NsecToTimespec(d.Nanoseconds())
					for unix.Nanosleep(&ts, &ts) == unix.EINTR {
					}
				}
				off := rng.Int64N(blocks) * BlockSize
				t0 := time.Now()
				if _, err := unix.Pread(int(f.Fd()), buf, off); err != nil {
					return nil, fmt.Errorf("measure idle curve: read %s at %d: %w", path, off, err)
				}
				end := time.Now()
				if k >= idleWarm {
					lat[i] = append(lat[i], end.Sub(t0).Nanoseconds())
					gap[i] = append(gap[i], t0.Sub(last).Nanoseconds())
				}
				last = end
			}
		}
	}
	pts := make([]formats.IdlePoint, len(idleGaps))
	for i := range idleGaps {
		pts[i] = formats.IdlePoint{GapNS: uint64(medianNS(gap[i])), P50NS: uint64(medianNS(lat[i]))}
	}
	slices.SortFunc(pts, func(a, b formats.IdlePoint) int { return int(int64(a.GapNS) - int64(b.GapNS)) })
	return pts, nil
}

// medianNS returns the median of v (which it sorts).
func medianNS(v []int64) int64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// alignedBuf returns n bytes aligned for O_DIRECT (4 KiB).
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)) % 4096
	return b[off : off+n]
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
