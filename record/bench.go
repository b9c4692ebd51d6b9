package record

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/bpf"
)

// benchSource drives the recorder with bench.bpf.c: every getppid(2) of
// this process emits perTrigger synthetic records into the events ring.
type benchSource struct {
	perTrigger uint32
	rate       float64       // offered events/s; 0: as fast as possible
	duration   time.Duration // how long to offer load
	triggers   atomic.Uint64

	coll *ebpf.Collection
	l    link.Link
}

func (b *benchSource) attach(r *recorder) error {
	spec, err := bpf.LoadBench()
	if err != nil {
		return fmt.Errorf("load bench spec: %w", err)
	}
	for name, v := range map[string]any{"bench_tgid": uint32(os.Getpid()), "bench_ino": uint64(1), "bench_dev": uint32(1)} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	if err := spec.Variables["per_trigger"].Set(b.perTrigger); err != nil {
		return err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{
			bpf.RecordMapEvents:   r.coll.Maps[bpf.RecordMapEvents],
			bpf.RecordMapCounters: r.coll.Maps[bpf.RecordMapCounters],
		},
	})
	if err != nil {
		return fmt.Errorf("load bench program: %w", err)
	}
	l, err := link.Tracepoint("syscalls", "sys_enter_getppid", coll.Programs["bench_emit"], nil)
	if err != nil {
		coll.Close()
		return fmt.Errorf("attach bench program: %w", err)
	}
	b.coll, b.l = coll, l
	// The synthetic file: give it a name so it resolves.
	r.files.add(fileKey{dev: 1, ino: 1}, 0, "/bench/synthetic")
	return nil
}

func (b *benchSource) detach() {
	if b.l != nil {
		b.l.Close()
		b.l = nil
	}
	if b.coll != nil {
		b.coll.Close()
		b.coll = nil
	}
}

// run offers load for b.duration, paced to b.rate.
func (b *benchSource) run(ctx context.Context) {
	start := time.Now()
	end := start.Add(b.duration)
	var n uint64
	for {
		now := time.Now()
		if now.After(end) || ctx.Err() != nil {
			break
		}
		if b.rate > 0 {
			due := uint64(now.Sub(start).Seconds() * b.rate / float64(b.perTrigger))
			if n >= due {
				continue
			}
		}
		for i := 0; i < 16; i++ {
			unix.Getppid()
		}
		n += 16
	}
	b.triggers.Store(n)
}
