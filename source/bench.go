package source

import (
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/predictio/predictio/bpf"
)

// benchSource drives a Source with bench.bpf.c: every getppid(2) of a
// separate load process emits perTrigger synthetic records into the events
// ring. The load process (cmd) waits for a line on stdin, then calls
// getppid at its paced rate and prints how many calls it made. done is
// closed when it has finished.
type benchSource struct {
	perTrigger uint32
	cmd        *exec.Cmd // load process, not started
	triggers   atomic.Uint64
	err        error
	done       chan struct{}

	coll *ebpf.Collection
	l    link.Link
}

func (b *benchSource) attach(s *Source) error {
	spec, err := bpf.LoadBench()
	if err != nil {
		return fmt.Errorf("load bench spec: %w", err)
	}
	for name, v := range map[string]any{"bench_ino": uint64(1), "bench_dev": uint32(1), "per_trigger": b.perTrigger} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{
			bpf.RecordMapEvents:   s.coll.Maps[bpf.RecordMapEvents],
			bpf.RecordMapCounters: s.coll.Maps[bpf.RecordMapCounters],
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
	// The synthetic file, so that it resolves.
	s.files.add(fileKey{dev: 1, ino: 1}, 0, "/bench/synthetic")
	return nil
}

func (b *benchSource) detach() {
	if b.coll != nil {
		_ = b.coll.Variables["bench_tgid"].Set(uint32(0))
	}
	if b.l != nil {
		b.l.Close()
		b.l = nil
	}
	if b.coll != nil {
		b.coll.Close()
		b.coll = nil
	}
}

// run starts the load process, points the program at it and waits.
func (b *benchSource) run() {
	defer close(b.done)
	in, err := b.cmd.StdinPipe()
	if err != nil {
		b.err = err
		return
	}
	var out strings.Builder
	b.cmd.Stdout = &out
	if err := b.cmd.Start(); err != nil {
		b.err = err
		return
	}
	if err := b.coll.Variables["bench_tgid"].Set(uint32(b.cmd.Process.Pid)); err != nil {
		b.err = err
		b.cmd.Process.Kill()
		b.cmd.Wait()
		return
	}
	io.WriteString(in, "go\n")
	in.Close()
	if err := b.cmd.Wait(); err != nil {
		b.err = fmt.Errorf("bench load process: %w", err)
		return
	}
	n, err := strconv.ParseUint(strings.TrimSpace(out.String()), 10, 64)
	if err != nil {
		b.err = fmt.Errorf("bench load process printed %q", out.String())
		return
	}
	b.triggers.Store(n)
}
