package source

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// testRing makes a ring buffer map and a program that writes one 8-byte
// record to it per run, with a wakeup unless quiet. It skips where bpf(2)
// is refused.
func testRing(t *testing.T) (m *ebpf.Map, submit func(v uint64, quiet bool)) {
	t.Helper()
	m, write := testRingFlags(t)
	const noWakeup, forceWakeup = 1, 2 // BPF_RB_NO_WAKEUP, BPF_RB_FORCE_WAKEUP
	return m, func(v uint64, quiet bool) {
		if quiet {
			write(v, noWakeup)
		} else {
			write(v, forceWakeup)
		}
	}
}

// openRing opens a reader of m, closed when the test ends.
func openRing(t *testing.T, m *ebpf.Map, mode ringMode, setFlag func(bool) error) *ring {
	t.Helper()
	r, err := newRing(m, mode, setFlag)
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
	r := openRing(t, m, ringPolled, nil)

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
	r := openRing(t, m, ringPolled, nil)
	done := readAsync(r)
	waitState(t, "IO wait")
	r.Close()
	expect(t, done, ringbuf.ErrClosed)
}

// TestRingBlocks checks a LowLatency reader still waits in its own
// epoll_wait, on the thread it runs on.
func TestRingBlocks(t *testing.T) {
	m, submit := testRing(t)
	r := openRing(t, m, ringBlocking, nil)
	done := readAsync(r)
	waitState(t, "syscall")
	submit(20, false)
	expect(t, done, nil)
}

// adaptiveRing is a ring whose writer behaves as bpf/record.h's submit in
// LowLatency mode: without a wakeup while the reader's polling flag is
// set, else with the kernel's adaptive default. A reader goroutine sends
// each record's value on recs.
type adaptiveRing struct {
	r       *ring
	polling atomic.Bool
	sets    atomic.Int32 // flag changes
	recs    chan uint64
	errs    chan error
	write   func(v uint64, flags int64)
}

func newAdaptiveRing(t *testing.T) *adaptiveRing {
	t.Helper()
	m, write := testRingFlags(t)
	a := &adaptiveRing{recs: make(chan uint64, 64), errs: make(chan error, 1), write: write}
	a.r = openRing(t, m, ringAdaptive, func(on bool) error {
		a.polling.Store(on)
		a.sets.Add(1)
		return nil
	})
	// What counts as dense depends on how fast the reader wakes: an
	// emulated VM (the kmod suite's) takes longer than denseGap.
	a.r.low.gap = 50 * time.Millisecond
	// Nor can it answer a record within quietPolls naps, so a spell
	// would end between two of the test's records (500 naps: ≥100 ms).
	a.r.low.quietMax = 500
	go func() {
		var rec ringbuf.Record
		for {
			if err := a.r.ReadInto(&rec); err != nil {
				a.errs <- err
				return
			}
			a.recs <- uint64(len(rec.RawSample))
		}
	}()
	return a
}

// submit writes a record of v bytes as record.h's submit does.
func (a *adaptiveRing) submit(v uint64) {
	flags := int64(0)
	if a.polling.Load() {
		flags = 1 // BPF_RB_NO_WAKEUP
	}
	a.write(v, flags)
}

// next returns the next record's value, failing after d.
func (a *adaptiveRing) next(t *testing.T, d time.Duration, what string) uint64 {
	t.Helper()
	select {
	case v := <-a.recs:
		return v
	case err := <-a.errs:
		t.Fatalf("%s: ReadInto returned %v", what, err)
	case <-time.After(d):
		t.Fatalf("%s: no record within %v", what, d)
	}
	return 0
}

// testRingFlags makes a ring buffer map and a writer of one 8-byte record
// per call, submitted with the caller's flags (0, BPF_RB_NO_WAKEUP or
// BPF_RB_FORCE_WAKEUP). It skips where the kernel has no ring buffers.
func testRingFlags(t *testing.T) (*ebpf.Map, func(v uint64, flags int64)) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("create ring buffer map: the kernel has no BPF ring buffers (Linux 5.8): %v", err)
	}
	if err != nil {
		t.Fatalf("create ring buffer map: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	progs := map[int64]*ebpf.Program{}
	for _, flags := range []int64{0, 1, 2} {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type:    ebpf.SocketFilter,
			License: "GPL",
			Instructions: asm.Instructions{
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
		progs[flags] = p
	}
	return m, func(v uint64, flags int64) {
		if _, err := progs[flags].Run(&ebpf.RunOptions{Data: make([]byte, v)}); err != nil {
			t.Errorf("run ring buffer writer: %v", err)
		}
	}
}

// TestRingAdaptive checks the LowLatency events reader: a lone record
// wakes it; records coming densely start a polling spell in which records
// submitted without a wakeup are still read; a quiet spell ends it; a
// record submitted without a wakeup just after (a program that read the
// flag before it was cleared) is read by a bounded wait; Flush and
// SetDeadline end its waits.
func TestRingAdaptive(t *testing.T) {
	a := newAdaptiveRing(t)
	a.submit(20)
	if v := a.next(t, 2*time.Second, "a lone record"); v != 8 {
		t.Fatalf("record of %d bytes, want 8", v)
	}
	if a.polling.Load() {
		t.Fatal("one record started a polling spell")
	}
	// Dense records: denseWakes wakeups in a row, each within the gap of
	// the last. Retry where the test itself is descheduled between them.
	for i := 0; !a.polling.Load(); i++ {
		if i == 100 {
			t.Fatal("records 100 µs apart did not start a polling spell")
		}
		a.submit(21)
		a.next(t, 2*time.Second, "a dense record")
		// Spin (a sleep this short can take a millisecond) while the
		// reader goes back to its wait.
		for t0 := time.Now(); time.Since(t0) < 100*time.Microsecond; {
		}
	}
	// While it polls, the writers do not wake it, and it still reads.
	for range 20 {
		a.write(22, 1)
		a.next(t, time.Second, "a record without wakeup while polling")
	}
	// A quiet spell ends polling.
	deadline := time.Now().Add(2 * time.Second)
	for a.polling.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the polling spell did not end in 2 s of quiet")
		}
		time.Sleep(time.Millisecond)
	}
	// The race after the flag is cleared: a record without wakeup.
	a.write(23, 1)
	a.next(t, time.Second, "a record without wakeup after the spell")

	if err := a.r.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.errs:
		if !errors.Is(err, ringbuf.ErrFlushed) {
			t.Fatalf("after Flush ReadInto returned %v, want ErrFlushed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Flush did not end the wait within 2 s")
	}
}

// TestRingAdaptiveBlocks checks that an adaptive reader blocks once its
// bounded waits after a polling spell are over: it uses no CPU while
// nothing happens, and a record without a wakeup then waits for one that
// forces it.
func TestRingAdaptiveBlocks(t *testing.T) {
	m, write := testRingFlags(t)
	r := openRing(t, m, ringAdaptive, func(bool) error { return nil })
	r.low.backoff = firstBackoff // as after a polling spell
	done := readAsync(r)
	time.Sleep(2 * maxBackoff)
	cpu0 := processCPU(t)
	write(24, 1) // BPF_RB_NO_WAKEUP
	time.Sleep(maxBackoff + 200*time.Millisecond)
	if d := processCPU(t) - cpu0; d > 50*time.Millisecond {
		t.Errorf("an idle adaptive reader used %v of CPU in %v", d, maxBackoff)
	}
	select {
	case err := <-done:
		t.Fatalf("ReadInto returned (%v) on a record without wakeup after its bounded waits", err)
	default:
	}
	write(25, 2) // BPF_RB_FORCE_WAKEUP
	expect(t, done, nil)
	expect(t, readAsync(r), nil)
	done = readAsync(r)
	waitState(t, "syscall")
	r.SetDeadline(time.Now())
	expect(t, done, os.ErrDeadlineExceeded)
}

// processCPU is this process's user and system time.
func processCPU(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestRingAdaptiveClose(t *testing.T) {
	m, _ := testRingFlags(t)
	r := openRing(t, m, ringAdaptive, func(bool) error { return nil })
	done := readAsync(r)
	waitState(t, "syscall")
	r.Close()
	expect(t, done, ringbuf.ErrClosed)
}
