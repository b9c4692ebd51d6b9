package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/predictio/predictio/internal/testenv"
	"github.com/predictio/predictio/uring"
	"golang.org/x/sys/unix"
)

const (
	blockSize = 4096
	fileSize  = 4 << 20
	nBlocks   = fileSize / blockSize
)

var pattern = testenv.Pattern

func scratchDir(t testing.TB) string {
	t.Helper()
	return testenv.ScratchDir(t, "engine-test-", "no scratch directory on a filesystem with O_DIRECT (only tmpfs found)")
}

func knownFile(t testing.TB) *os.File {
	t.Helper()
	path := filepath.Join(scratchDir(t), "known")
	testenv.WritePattern(t, path, fileSize)
	f, err := OpenDirect(path, os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func newEngine(t testing.TB, files []*os.File, opts ...Option) *Engine {
	t.Helper()
	e, err := New(files, opts...)
	if errors.Is(err, uring.ErrNotSupported) {
		t.Skipf("kernel lacks io_uring: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// checker verifies each completion's bytes against its token (block number)
// and that every token completes exactly once.
type checker struct {
	mu   sync.Mutex
	seen map[uint64]int
	errs []error
}

func (k *checker) handle(c *Completion) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen[c.Token]++
	switch {
	case c.Err != nil:
		k.errs = append(k.errs, fmt.Errorf("token %d: %w", c.Token, c.Err))
	case c.Off != int64(c.Token%nBlocks)*blockSize:
		k.errs = append(k.errs, fmt.Errorf("token %d came back with offset %d", c.Token, c.Off))
	case c.Res != blockSize || len(c.Data) != blockSize:
		k.errs = append(k.errs, fmt.Errorf("token %d: res %d", c.Token, c.Res))
	default:
		for j, b := range c.Data {
			if b != pattern(c.Off+int64(j)) {
				k.errs = append(k.errs, fmt.Errorf("token %d: byte %d is %#x, want %#x", c.Token, j, b, pattern(c.Off+int64(j))))
				return
			}
		}
	}
}

func TestReadKnownBytes(t *testing.T) {
	f := knownFile(t)
	cases := []struct {
		name string
		opts []Option
	}{
		{"plain-wait", nil},
		{"plain-backoff", []Option{WithHarvest(HarvestBackoff)}},
		{"unfixed", []Option{WithFixedBuffers(false), WithFixedFiles(false)}},
		{"sqpoll-wait", []Option{WithSQPoll(time.Second)}},
		{"sqpoll-backoff", []Option{WithSQPoll(time.Second), WithHarvest(HarvestBackoff)}},
		{"sqpoll-2workers", []Option{WithSQPoll(time.Second), WithWorkers(2), WithHarvest(HarvestBackoff)}},
		{"shared-2workers", []Option{WithSharedPoller(time.Second), WithWorkers(2), WithHarvest(HarvestBackoff)}},
		{"shared-wait", []Option{WithSharedPoller(10 * time.Millisecond), WithWorkers(2)}},
		{"defer-taskrun", []Option{WithDeferTaskrun(), WithWorkers(2)}},
		{"defer-taskrun-backoff", []Option{WithDeferTaskrun(), WithHarvest(HarvestBackoff)}},
		{"raw-defer", []Option{WithRawSyscalls(), WithDeferTaskrun(), WithWorkers(2)}},
		{"eager", []Option{WithEagerSubmit(), WithDeferTaskrun()}},
		{"raw-shared", []Option{WithRawSyscalls(), WithSharedPoller(time.Second), WithWorkers(2)}},
	}
	const perWorker = 300
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := &checker{seen: map[uint64]int{}}
			opts := append([]Option{WithQueueDepth(8), WithHandler(k.handle)}, tc.opts...)
			e := newEngine(t, []*os.File{f}, opts...)
			var wg sync.WaitGroup
			errc := make(chan error, e.Workers())
			for wi := 0; wi < e.Workers(); wi++ {
				wg.Add(1)
				go func(w *Worker, base uint64) {
					defer wg.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					for i := uint64(0); i < perWorker; i++ {
						tok := base + i*97%nBlocks
						if err := w.Submit(Request{Op: OpRead, Off: int64(tok%nBlocks) * blockSize, Len: blockSize, Token: tok}); err != nil {
							errc <- err
							return
						}
						if w.InFlight() > 8 {
							errc <- fmt.Errorf("%d in flight with queue depth 8", w.InFlight())
							return
						}
					}
					errc <- w.Drain()
				}(e.Worker(wi), uint64(wi)*nBlocks)
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(k.errs) > 0 {
				t.Fatal(errors.Join(k.errs...))
			}
			for tok, n := range k.seen {
				if n != 1 {
					t.Fatalf("token %d completed %d times", tok, n)
				}
			}
			if len(k.seen) != perWorker*e.Workers() {
				t.Fatalf("%d tokens completed, want %d", len(k.seen), perWorker*e.Workers())
			}
			s := e.Stats()
			if s.Completed != uint64(perWorker*e.Workers()) || s.Backpress == 0 {
				t.Fatalf("stats %+v", s)
			}
			t.Logf("mlocked %v; %d enters (%.3f/op), %d yields, %d wakeups", e.Mlocked(), s.Ring.Enters,
				float64(s.Ring.Enters)/float64(s.Completed), s.Yields, s.Ring.Wakeups)
		})
	}
}

func TestWriteReadBackAndFadvise(t *testing.T) {
	f := knownFile(t)
	var got []byte
	var errs []error
	e := newEngine(t, []*os.File{f}, WithQueueDepth(4), WithHandler(func(c *Completion) {
		if c.Err != nil {
			errs = append(errs, c.Err)
		}
		if c.Op == OpRead {
			got = append(got[:0], c.Data...)
		}
	}))
	w := e.Worker(0)
	data := make([]byte, blockSize)
	for i := range data {
		data[i] = byte(i * 31)
	}
	if err := w.Submit(Request{Op: OpWrite, Off: 5 * blockSize, Len: blockSize, Data: data}); err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(); err != nil {
		t.Fatal(err)
	}
	if err := w.Submit(Request{Op: OpRead, Off: 5 * blockSize, Len: blockSize}); err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(data) {
		t.Fatal("read back differs from what was written")
	}
	// FADVISE on the same file: completes without error.
	if err := w.Submit(Request{Op: OpFadvise, Off: 0, Len: fileSize, Advice: unix.FADV_DONTNEED}); err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(); err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
}

// TestEINVALIsolation checks that an unaligned O_DIRECT read fails alone,
// with an error naming op, file and offset.
func TestEINVALIsolation(t *testing.T) {
	f := knownFile(t)
	k := &checker{seen: map[uint64]int{}}
	var bad error
	e := newEngine(t, []*os.File{f}, WithQueueDepth(8), WithHandler(func(c *Completion) {
		if c.Token == 999 {
			bad = c.Err
			return
		}
		k.handle(c)
	}))
	w := e.Worker(0)
	for i := uint64(0); i < 6; i++ {
		if i == 3 {
			if err := w.Submit(Request{Op: OpRead, Off: 1, Len: blockSize, Token: 999}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Submit(Request{Op: OpRead, Off: int64(i) * blockSize, Len: blockSize, Token: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Drain(); err != nil {
		t.Fatal(err)
	}
	if len(k.errs) > 0 || len(k.seen) != 6 {
		t.Fatalf("aligned reads: %d done, errors %v", len(k.seen), k.errs)
	}
	var oe *uring.OpError
	if !errors.Is(bad, unix.EINVAL) || !errors.As(bad, &oe) || oe.File != f.Name() || oe.Off != 1 {
		t.Fatalf("unaligned read error = %v, want EINVAL naming %s at offset 1", bad, f.Name())
	}
	if e.Stats().Errors != 1 {
		t.Fatalf("errors %d, want 1", e.Stats().Errors)
	}
}

func TestBadInput(t *testing.T) {
	f := knownFile(t)
	h := WithHandler(func(*Completion) {})
	for _, opts := range [][]Option{
		{WithQueueDepth(0), h},
		{WithBufferSize(1000), h},
		{WithWorkers(0), h},
		{WithDeferTaskrun(), WithSQPoll(time.Second), h},
		{},
	} {
		if _, err := New([]*os.File{f}, opts...); err == nil {
			t.Errorf("New accepted a bad config")
		}
	}
	if _, err := New(nil, h); err == nil {
		t.Error("New accepted no files")
	}
	e := newEngine(t, []*os.File{f}, h)
	w := e.Worker(0)
	for _, r := range []Request{
		{Op: OpRead, File: 1, Len: blockSize},
		{Op: OpRead, Off: -4096, Len: blockSize},
		{Op: OpRead, Len: 2 * blockSize},
		{Op: OpRead, Len: 0},
		{Op: Op(9), Len: blockSize},
		// fadvise takes a 32-bit length; 4 GiB must not wrap to 0 (the
		// whole file) nor -1 to 4 GiB-1.
		{Op: OpFadvise, Len: 1 << 32, Advice: unix.FADV_DONTNEED},
		{Op: OpFadvise, Len: -1, Advice: unix.FADV_DONTNEED},
		// A short Data would write the pool buffer's stale tail (the
		// bytes of an earlier request) to the file.
		{Op: OpWrite, Len: blockSize, Data: make([]byte, 100)},
	} {
		if err := w.Submit(r); err == nil {
			t.Errorf("Submit accepted %+v", r)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Submit(Request{Op: OpRead, Len: blockSize}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	if _, err := w.Harvest(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Harvest after Close: %v", err)
	}
}

// BenchmarkRead measures the engine against the page-cache-free device.
func BenchmarkRead(b *testing.B) {
	f := knownFile(b)
	for _, qd := range []int{1, 32} {
		b.Run(fmt.Sprintf("qd%d", qd), func(b *testing.B) {
			e := newEngine(b, []*os.File{f}, WithQueueDepth(qd), WithHandler(func(*Completion) {}))
			w := e.Worker(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := w.Submit(Request{Op: OpRead, Off: int64(i*7919%nBlocks) * blockSize, Len: blockSize}); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Drain(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestCloseDeferTaskrunBackoffFromOtherThread closes a DEFER_TASKRUN engine
// with completions still pending from a goroutine that is not the ring's
// issuer: the kernel refuses its flush (EEXIST), and HarvestBackoff must
// give up instead of spinning forever.
func TestCloseDeferTaskrunBackoffFromOtherThread(t *testing.T) {
	f := knownFile(t)
	e, err := New([]*os.File{f}, WithDeferTaskrun(), WithHarvest(HarvestBackoff), WithQueueDepth(4),
		WithHandler(func(*Completion) {}))
	if errors.Is(err, uring.ErrNotSupported) {
		t.Skipf("kernel lacks io_uring: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	submitFromIssuer(t, e.Worker(0), 4)
	time.Sleep(50 * time.Millisecond) // let the reads complete into deferred task work
	if _, err := e.Worker(0).Harvest(1); !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), "worker 0") {
		t.Errorf("Harvest from a non-issuer thread: %v, want EEXIST naming the worker", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close from a non-issuer thread hung in HarvestBackoff")
	}
}

// TestCloseKeepsUnregisteredBuffersInFlight closes an engine whose requests
// are still in flight (a non-issuer thread cannot drain a DEFER_TASKRUN
// ring). Registered buffers are pinned, so they are unmapped; unregistered
// ones stay mapped, because a read the kernel is still executing copies
// into them by address.
func TestCloseKeepsUnregisteredBuffersInFlight(t *testing.T) {
	for _, fixed := range []bool{true, false} {
		t.Run(fmt.Sprintf("fixed=%v", fixed), func(t *testing.T) {
			f := knownFile(t)
			e, err := New([]*os.File{f}, WithDeferTaskrun(), WithFixedBuffers(fixed), WithQueueDepth(4),
				WithHandler(func(*Completion) {}))
			if errors.Is(err, uring.ErrNotSupported) {
				t.Skipf("kernel lacks io_uring: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			w := e.Worker(0)
			addr := uintptr(unsafe.Pointer(&w.mem[0]))
			submitFromIssuer(t, w, 4)
			if !isMapped(t, addr) {
				t.Fatalf("buffer pool at %#x not in /proc/self/maps before Close", addr)
			}
			if err := e.Close(); err != nil {
				t.Logf("Close: %v", err)
			}
			if got := isMapped(t, addr); got == fixed {
				t.Errorf("after Close with %d requests in flight, buffers (fixed %v) mapped: %v, want %v", w.InFlight(), fixed, got, !fixed)
			}
		})
	}
}

// isMapped reports whether addr lies in a mapping of this process.
func isMapped(t *testing.T, addr uintptr) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil && uint64(addr) >= lo && uint64(addr) < hi {
			return true
		}
	}
	return false
}

// submitFromIssuer submits n block reads to w from a goroutine locked to a
// thread of its own, which becomes the ring's issuer (a DEFER_TASKRUN ring
// is enabled by its first submitter); the test's own thread is then not
// the issuer and cannot drain it.
func submitFromIssuer(t *testing.T, w *Worker, n int) {
	t.Helper()
	submitted := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		for i := 0; i < n; i++ {
			if err := w.Submit(Request{Op: OpRead, Off: int64(i) * blockSize, Len: blockSize}); err != nil {
				submitted <- err
				return
			}
		}
		submitted <- w.Flush()
	}()
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
}
