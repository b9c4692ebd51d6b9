package eval

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/predictio/predictio/hints"
	"github.com/predictio/predictio/source"
)

// Figure 8 varies the hint message size; source's BenchmarkHintSocket
// sends one size. These points drive the same server (source's hint
// server) with the same client (package hints) from this process: one
// sender sends tree_child_enter hints as fast as the client lets it, and
// the point reports what the server delivered.

// hintSizes are the message sizes of the points, in bytes.
func hintSizes(quick bool) []int {
	if quick {
		return []int{64, 4096}
	}
	return []int{64, 256, 1024, 4096}
}

// hintSizePoints: the sender is not paced, so each point is the server's
// saturation throughput at that size, with the share the client dropped.
func hintSizePoints(c *Context) []*PointSpec {
	n := 200_000
	if c.Quick {
		n = 20_000
	}
	var out []*PointSpec
	for _, size := range hintSizes(c.Quick) {
		size := size
		out = append(out, &PointSpec{ID: fmt.Sprintf("hint-size/bytes=%d", size),
			Params: map[string]string{"figure": "8", "bytes": strconv.Itoa(size), "hints": strconv.Itoa(n)},
			Cold:   controlCold, Est: 2 * time.Second,
			Modes: []ModeSpec{{Name: "predictio", Run: func(ctx context.Context, _ *RunInfo) (*Sample, error) {
				return hintSizeRun(ctx, size, n)
			}}}})
	}
	return out
}

// childrenFor returns the number of children that makes a path-form
// tree_child_enter of path about size bytes long, and that length.
func childrenFor(path string, size int) (int, int) {
	best, blen := 0, 0
	for k := 0; k <= hints.MaxChildren; k++ {
		b, err := hints.AppendTreeChildEnter(nil, path, 1, 0, make([]uint64, k))
		if err != nil || len(b) > size {
			break
		}
		best, blen = k, len(b)
	}
	return best, blen
}

func hintSizeRun(ctx context.Context, size, n int) (*Sample, error) {
	// A short path, so that the smallest messages fit: the hinted file
	// is never read, only checked for access.
	dir, err := os.MkdirTemp("", "ph")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "index.db")
	if err := os.WriteFile(data, make([]byte, 1<<20), 0o644); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "hints.sock")
	src, err := source.Open(source.Config{HintSocket: sock})
	if err != nil {
		return nil, fmt.Errorf("%w: open the hint server: %v", ErrNotRun, err)
	}
	defer src.Close()
	if err := src.Start(source.ConsumerFunc(func(*source.Batch) error { return nil })); err != nil {
		return nil, err
	}
	cl, err := hints.Dial(sock)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	k, msg := childrenFor(data, size)
	if msg == 0 {
		return nil, fmt.Errorf("a hint naming %s does not fit in %d bytes", data, size)
	}
	children := make([]uint64, k)
	for i := range children {
		children[i] = uint64(3 + i*7)
	}
	file := hints.Path(data)
	t0 := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if err := cl.TreeChildEnter(file, uint64(i), 0, children); err != nil {
			return nil, fmt.Errorf("send hint: %w", err)
		}
	}
	send := time.Since(t0)
	cl.Flush()
	dropped := cl.Dropped()
	deadline := time.Now().Add(30 * time.Second)
	for src.Stats().Hints+dropped < uint64(n) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(t0)
	src.Stop()
	st := src.Stats()
	return &Sample{Metrics: map[string]float64{
		"message_bytes":      float64(msg),
		"offered_per_s":      float64(n) / send.Seconds(),
		"hints_per_s":        float64(st.Hints) / el.Seconds(),
		"drop_pct":           100 * float64(dropped) / float64(n),
		"server_ns_per_hint": float64(st.HintCPU.Nanoseconds()) / max(float64(st.Hints), 1),
	}}, nil
}
