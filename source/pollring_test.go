package source

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"
)

// testRing makes a ring buffer map and a program that writes one 8-byte
// record to it per run, with a wakeup unless quiet. It skips where bpf(2)
// is refused.
func testRing(t *testing.T) (m *ebpf.Map, submit func(v uint64, quiet bool)) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("create ring buffer map: the kernel has no BPF ring buffers (Linux 5.8): %v", err)
	}
	if err != nil {
		t.Fatalf("create ring buffer map: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	prog := func(flags int64) *ebpf.Program {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type:    ebpf.SocketFilter,
			License: "GPL",
			Instructions: asm.Instructions{
				// The record's value is the socket buffer's length.
				asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
				asm.StoreMem(asm.RFP, -8, asm.R2, asm.DWord),
				asm.LoadMapPtr(asm.R1, m.FD()),
				asm.Mov.Reg(asm.R2, asm.RFP),
				asm.Add.Imm(asm.R2, -8),
				asm.Mov.Imm(asm.R3, 8),
				asm.Mov.Imm(asm.R4, int32(flags)),
				asm.FnRingbufOutput.Call(),
				asm.Mov.Imm(asm.R0, 0),
				asm.Return(),
			},
		})
		if err != nil {
			t.Fatalf("load ring buffer writer: %v", err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	const noWakeup, forceWakeup = 1, 2 // BPF_RB_NO_WAKEUP, BPF_RB_FORCE_WAKEUP
	loud, silent := prog(forceWakeup), prog(noWakeup)
	return m, func(v uint64, quiet bool) {
		p := loud
		if quiet {
			p = silent
		}
		if _, err := p.Run(&ebpf.RunOptions{Data: make([]byte, v)}); err != nil {
			t.Errorf("run ring buffer writer: %v", err)
		}
	}
}

// openRing opens a reader of m, closed when the test ends.
func openRing(t *testing.T, m *ebpf.Map, blocking bool) *ring {
	t.Helper()
	r, err := newRing(m, blocking)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// readAsync starts one ReadInto and returns what it returns.
func readAsync(r *ring) <-chan error {
	done := make(chan error, 1)
	go func() {
		var rec ringbuf.Record
		err := r.ReadInto(&rec)
		if err == nil && len(rec.RawSample) < 8 {
			err = errors.New("short record")
		}
		done <- err
	}()
	return done
}

// waitState waits until a goroutine that runs (*ring).ReadInto is in the
// state the runtime names state ("IO wait", "syscall"), and fails after
// two seconds.
func waitState(t *testing.T, state string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	var last string
	for range 200 {
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			if !strings.Contains(g, "(*ring).ReadInto") {
				continue
			}
			header, _, _ := strings.Cut(g, "\n")
			if strings.Contains(header, "["+state) {
				return
			}
			last = header
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the ring's reader is not in state %q: last seen %q", state, last)
}

func expect(t *testing.T, done <-chan error, want error) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("ReadInto returned %v, want %v", err, want)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("ReadInto did not return within 2 s (want %v)", want)
	}
}

// TestRingPolls checks that a batched reader waits in the Go runtime's
// poller and holds no thread in a system call (the daemon's idle cost,
// docs/BENCHMARKS.md), and that a record with a wakeup, Flush, SetDeadline
// and Close each end its wait.
func TestRingPolls(t *testing.T) {
	m, submit := testRing(t)
	r := openRing(t, m, false)

	done := readAsync(r)
	waitState(t, "IO wait")
	submit(20, false)
	expect(t, done, nil)

	// A record without a wakeup waits for Flush, which returns it and
	// then ErrFlushed.
	done = readAsync(r)
	waitState(t, "IO wait")
	submit(21, true)
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("ReadInto returned %v on a record without wakeup", err)
	default:
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	expect(t, done, nil)
	expect(t, readAsync(r), ringbuf.ErrFlushed)

	done = readAsync(r)
	waitState(t, "IO wait")
	r.SetDeadline(time.Now())
	expect(t, done, os.ErrDeadlineExceeded)

	// After SetDeadline the reader drains without waiting.
	submit(22, true)
	expect(t, readAsync(r), nil)
	expect(t, readAsync(r), os.ErrDeadlineExceeded)
}

func TestRingPollsClose(t *testing.T) {
	m, _ := testRing(t)
	r := openRing(t, m, false)
	done := readAsync(r)
	waitState(t, "IO wait")
	r.Close()
	expect(t, done, ringbuf.ErrClosed)
}

// TestRingBlocks checks a LowLatency reader still waits in its own
// epoll_wait, on the thread it runs on.
func TestRingBlocks(t *testing.T) {
	m, submit := testRing(t)
	r := openRing(t, m, true)
	done := readAsync(r)
	waitState(t, "syscall")
	submit(20, false)
	expect(t, done, nil)
}
