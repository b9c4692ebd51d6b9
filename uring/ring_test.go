package uring

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/predictio/predictio/internal/testenv"
	"golang.org/x/sys/unix"
)

const (
	blockSize = 4096
	fileSize  = 1 << 20
)

func pattern(off int) byte { return testenv.Pattern(int64(off)) }

// scratchDir returns a directory on a filesystem that honours O_DIRECT
// (/tmp may be tmpfs, which does not).
func scratchDir(t testing.TB) string {
	t.Helper()
	return testenv.ScratchDir(t, "uring-test-", "no scratch directory on a filesystem with O_DIRECT (only tmpfs found)")
}

// knownFile writes fileSize bytes of pattern() and reopens it O_DIRECT.
func knownFile(t testing.TB) *os.File {
	t.Helper()
	path := filepath.Join(scratchDir(t), "known")
	testenv.WritePattern(t, path, fileSize)
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatalf("open %s O_DIRECT: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// alignedBuf returns page-aligned memory outside the Go heap.
func alignedBuf(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func newRing(t testing.TB, entries uint32, opts ...Option) *Ring {
	t.Helper()
	r, err := New(entries, opts...)
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("kernel lacks io_uring: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// waitAll reaps until n CQEs arrived, using SubmitAndWait(1) when empty.
func waitAll(t testing.TB, r *Ring, n int) []CQE {
	t.Helper()
	var out []CQE
	buf := make([]CQE, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		got, err := r.Reap(buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:got]...)
		if got == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("timed out: %d of %d completions", len(out), n)
			}
			if _, err := r.SubmitAndWait(1); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

func TestLayoutAndProbe(t *testing.T) {
	r := newRing(t, 8)
	p, err := r.Probe()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []Op{OpNop, OpRead, OpWrite, OpReadFixed, OpWriteFixed, OpFadvise, OpMadvise} {
		if !p.Supported(op) {
			t.Errorf("probe: %v not supported", op)
		}
	}
	if p.Supported(Op(255)) {
		t.Error("probe: op 255 reported supported")
	}
	if r.SQEntries() != 8 || r.CQEntries() != 16 {
		t.Errorf("entries sq %d cq %d, want 8 and 16", r.SQEntries(), r.CQEntries())
	}
	t.Logf("features %#x, single mmap %v", r.Features(), r.Features()&FeatSingleMmap != 0)
}

type mode struct {
	name       string
	opts       func(t *testing.T) []Option
	fixedBufs  bool
	fixedFiles bool
	lockThread bool
}

func modes() []mode {
	none := func(*testing.T) []Option { return nil }
	return []mode{
		{name: "plain", opts: none},
		{name: "sqpoll", opts: func(*testing.T) []Option { return []Option{WithSQPoll(time.Second)} }},
		{name: "sqpoll-cpu0", opts: func(*testing.T) []Option { return []Option{WithSQPoll(time.Second), WithSQThreadCPU(0)} }},
		{name: "shared-poller", opts: func(t *testing.T) []Option {
			owner := newRing(t, 8, WithSQPoll(time.Second))
			return []Option{WithSQPoll(time.Second), WithAttachWQ(owner)}
		}},
		{name: "fixedbufs", opts: none, fixedBufs: true},
		{name: "fixedfiles", opts: none, fixedFiles: true},
		{name: "sqpoll-fixed", opts: func(*testing.T) []Option { return []Option{WithSQPoll(time.Second)} }, fixedBufs: true, fixedFiles: true},
		{name: "coop-taskrun", opts: func(*testing.T) []Option { return []Option{WithCoopTaskrun(), WithCQSize(64)} }},
		{name: "single-issuer-defer", opts: func(*testing.T) []Option { return []Option{WithDeferTaskrun()} }, lockThread: true},
	}
}

func TestReadKnownBytes(t *testing.T) {
	f := knownFile(t)
	const qd = 8
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) {
			if m.lockThread {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			r := newRing(t, 16, m.opts(t)...)
			mem := alignedBuf(t, qd*blockSize)
			bufs := make([][]byte, qd)
			for i := range bufs {
				bufs[i] = mem[i*blockSize : (i+1)*blockSize]
			}
			if m.fixedBufs {
				if err := r.RegisterBuffers(bufs); err != nil {
					t.Fatal(err)
				}
			}
			fd := int32(f.Fd())
			if m.fixedFiles {
				if err := r.RegisterFiles([]int32{fd}); err != nil {
					t.Fatal(err)
				}
				fd = 0
			}
			for round := 0; round < 4; round++ {
				offs := make([]int, qd)
				for i := range offs {
					offs[i] = ((round*qd + i*37) % (fileSize / blockSize)) * blockSize
					clear(bufs[i])
					sqe := r.GetSQE()
					if sqe == nil {
						t.Fatal("GetSQE: SQ full")
					}
					if m.fixedBufs {
						sqe.PrepReadFixed(fd, bufs[i], uint64(offs[i]), uint16(i))
					} else {
						sqe.PrepRead(fd, bufs[i], uint64(offs[i]))
					}
					if m.fixedFiles {
						sqe.SetFixedFile()
					}
					sqe.UserData = uint64(i)
				}
				if _, err := r.Submit(); err != nil {
					t.Fatal(err)
				}
				for _, c := range waitAll(t, r, qd) {
					if err := c.Err(); err != nil {
						t.Fatalf("read %d: %v", c.UserData, err)
					}
					if c.Res != blockSize {
						t.Fatalf("read %d: %d bytes, want %d", c.UserData, c.Res, blockSize)
					}
					i := c.UserData
					for j, b := range bufs[i] {
						if b != pattern(offs[i]+j) {
							t.Fatalf("read %d at %d: byte %d is %#x, want %#x", i, offs[i], j, b, pattern(offs[i]+j))
						}
					}
				}
			}
			s := r.Stats()
			if s.Submitted != 4*qd || s.Reaped != 4*qd {
				t.Errorf("stats submitted %d reaped %d, want %d each", s.Submitted, s.Reaped, 4*qd)
			}
			if s.Enters != s.SubmitEnters+s.WaitEnters+s.Wakeups+s.FlushEnters+s.Interrupted {
				// Wakeups folded into a wait enter are counted in both.
				if !r.SQPoll() {
					t.Errorf("enters %d != submit %d + wait %d + wakeups %d + flush %d + interrupted %d", s.Enters, s.SubmitEnters, s.WaitEnters, s.Wakeups, s.FlushEnters, s.Interrupted)
				}
			}
			if !r.SQPoll() && s.SubmitEnters < 4 {
				t.Errorf("plain ring made %d submit enters for 4 batches", s.SubmitEnters)
			}
			t.Logf("%+v", s)
		})
	}
}

// TestExactEnterCount checks that one SubmitAndWait is one syscall.
func TestExactEnterCount(t *testing.T) {
	f := knownFile(t)
	r := newRing(t, 8)
	mem := alignedBuf(t, 4*blockSize)
	for i := 0; i < 4; i++ {
		r.GetSQE().PrepRead(int32(f.Fd()), mem[i*blockSize:(i+1)*blockSize], uint64(i*blockSize))
	}
	if _, err := r.SubmitAndWait(4); err != nil {
		t.Fatal(err)
	}
	if got := r.CQReady(); got != 4 {
		t.Fatalf("after SubmitAndWait(4): %d ready", got)
	}
	cqes := make([]CQE, 8)
	if n, err := r.Reap(cqes); err != nil || n != 4 {
		t.Fatalf("reaped %d", n)
	}
	if s := r.Stats(); s.Enters != 1 || s.WaitEnters != 1 {
		t.Fatalf("stats %+v, want exactly 1 enter", s)
	}
}

func TestWriteThenRead(t *testing.T) {
	f := knownFile(t)
	r := newRing(t, 8)
	mem := alignedBuf(t, 2*blockSize)
	w, rd := mem[:blockSize], mem[blockSize:]
	if err := r.RegisterBuffers([][]byte{w, rd}); err != nil {
		t.Fatal(err)
	}
	for i := range w {
		w[i] = byte(i * 13)
	}
	r.GetSQE().PrepWriteFixed(int32(f.Fd()), w, 8*blockSize, 0)
	r.GetSQE().PrepWrite(int32(f.Fd()), w, 9*blockSize)
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	for _, c := range waitAll(t, r, 2) {
		if c.Res != blockSize {
			t.Fatalf("write: res %d (%v)", c.Res, c.Err())
		}
	}
	for _, off := range []uint64{8 * blockSize, 9 * blockSize} {
		clear(rd)
		r.GetSQE().PrepReadFixed(int32(f.Fd()), rd, off, 1)
		if _, err := r.SubmitAndWait(1); err != nil {
			t.Fatal(err)
		}
		c := waitAll(t, r, 1)[0]
		if c.Res != blockSize || string(rd) != string(w) {
			t.Fatalf("read back at %d: res %d, data differs", off, c.Res)
		}
	}
}

func TestFadviseMadvise(t *testing.T) {
	path := filepath.Join(scratchDir(t), "buffered")
	if err := os.WriteFile(path, make([]byte, fileSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	r := newRing(t, 8)
	r.GetSQE().PrepFadvise(int32(f.Fd()), 0, fileSize, unix.FADV_WILLNEED)
	mem := alignedBuf(t, 4*blockSize)
	r.GetSQE().PrepMadvise(mem, unix.MADV_WILLNEED)
	if _, err := r.SubmitAndWait(2); err != nil {
		t.Fatal(err)
	}
	for _, c := range waitAll(t, r, 2) {
		if err := c.Err(); err != nil {
			t.Fatalf("advise %d: %v", c.UserData, err)
		}
	}
	// WILLNEED starts readahead; the pages should arrive shortly.
	var cs unix.Cachestat_t
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Len: fileSize}, &cs, 0)
		if errors.Is(err, unix.ENOSYS) {
			t.Skip("cachestat needs Linux 6.5")
		}
		if err != nil {
			t.Fatal(err)
		}
		if cs.Cache == fileSize/4096 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cs.Cache != fileSize/4096 {
		t.Fatalf("after FADVISE WILLNEED %d of %d pages cached", cs.Cache, fileSize/4096)
	}
}

// TestCQOverflow submits more NOPs than the CQ holds without reaping; with
// IORING_FEAT_NODROP the kernel keeps the overflow and Reap flushes it.
func TestCQOverflow(t *testing.T) {
	r := newRing(t, 4, WithCQSize(8))
	if r.Features()&FeatNoDrop == 0 {
		t.Skip("kernel lacks IORING_FEAT_NODROP (Linux 5.5)")
	}
	const total = 24
	for i := 0; i < total; i += 4 {
		for j := 0; j < 4; j++ {
			s := r.GetSQE()
			s.PrepNop()
			s.UserData = uint64(i + j)
		}
		if _, err := r.Submit(); err != nil {
			t.Fatalf("submit batch %d: %v", i/4, err)
		}
	}
	if atomic.LoadUint32(r.sqFlags)&sqCQOverflow == 0 {
		t.Fatal("IORING_SQ_CQ_OVERFLOW not set after overflowing the CQ")
	}
	seen := map[uint64]bool{}
	buf := make([]CQE, 3)
	for tries := 0; len(seen) < total && tries < 100; tries++ {
		n, err := r.Reap(buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range buf[:n] {
			if seen[c.UserData] {
				t.Fatalf("duplicate completion %d", c.UserData)
			}
			seen[c.UserData] = true
		}
	}
	if len(seen) != total {
		t.Fatalf("got %d of %d completions after overflow", len(seen), total)
	}
	s := r.Stats()
	if s.FlushEnters == 0 {
		t.Errorf("no overflow flush enter counted: %+v", s)
	}
	if s.Dropped != 0 {
		t.Errorf("kernel dropped %d CQEs", s.Dropped)
	}
}

// TestSQPollIdleWakeup lets the poller sleep (sq_thread_idle = 1 ms) and
// checks that Submit wakes it and the request completes.
func TestSQPollIdleWakeup(t *testing.T) {
	r := newRing(t, 8, WithSQPoll(time.Millisecond))
	for round := 0; round < 3; round++ {
		time.Sleep(50 * time.Millisecond)
		deadline := time.Now().Add(5 * time.Second)
		for atomic.LoadUint32(r.sqFlags)&sqNeedWakeup == 0 {
			if time.Now().After(deadline) {
				t.Fatal("SQPOLL thread never went idle with sq_thread_idle = 1ms")
			}
			time.Sleep(5 * time.Millisecond)
		}
		before := r.Stats().Wakeups
		s := r.GetSQE()
		s.PrepNop()
		s.UserData = uint64(round)
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		if r.Stats().Wakeups != before+1 {
			t.Fatalf("round %d: submit to an idle poller made no wakeup enter", round)
		}
		c := waitAll(t, r, 1)[0]
		if c.UserData != uint64(round) || c.Res != 0 {
			t.Fatalf("round %d: completion %+v", round, c)
		}
	}
	// Back-to-back submissions to an awake poller cost no syscall.
	before := r.Stats().Enters
	for i := 0; i < 4; i++ {
		s := r.GetSQE()
		s.PrepNop()
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
	}
	waitAll(t, r, 4)
	t.Logf("4 NOPs to a poller that was awake for some of them: %d enters", r.Stats().Enters-before)
}

// TestUnalignedDirectRead checks that an unaligned O_DIRECT read fails with
// EINVAL for that request alone.
func TestUnalignedDirectRead(t *testing.T) {
	f := knownFile(t)
	r := newRing(t, 8)
	mem := alignedBuf(t, 4*blockSize)
	fd := int32(f.Fd())
	r.GetSQE().PrepRead(fd, mem[:blockSize], 0)
	s := r.GetSQE()
	s.PrepRead(fd, mem[blockSize+1:2*blockSize+1], 1) // misaligned buffer and offset
	s.UserData = 1
	s = r.GetSQE()
	s.PrepRead(fd, mem[3*blockSize:], 2*blockSize)
	s.UserData = 2
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	for _, c := range waitAll(t, r, 3) {
		switch c.UserData {
		case 1:
			if !errors.Is(c.Err(), unix.EINVAL) {
				t.Fatalf("unaligned read: res %d, want -EINVAL", c.Res)
			}
			err := ResultError(OpRead, f.Name(), 1, c.Res)
			var oe *OpError
			if !errors.As(err, &oe) || !errors.Is(err, unix.EINVAL) || oe.File != f.Name() {
				t.Fatalf("ResultError = %v", err)
			}
		default:
			if c.Res != blockSize {
				t.Fatalf("aligned read %d: res %d (%v)", c.UserData, c.Res, c.Err())
			}
		}
	}
	if mem[0] != pattern(0) || mem[3*blockSize] != pattern(2*blockSize) {
		t.Fatal("aligned reads next to the failed one returned wrong bytes")
	}
}

func TestClosedRing(t *testing.T) {
	r, err := New(8)
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("kernel lacks io_uring: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.GetSQE().PrepNop()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if s := r.GetSQE(); s != nil {
		t.Error("GetSQE on a closed ring returned an SQE")
	}
	if _, err := r.Submit(); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit: %v", err)
	}
	if _, err := r.SubmitAndWait(1); !errors.Is(err, ErrClosed) {
		t.Errorf("SubmitAndWait: %v", err)
	}
	if n, err := r.Reap(make([]CQE, 4)); n != 0 || !errors.Is(err, ErrClosed) {
		t.Errorf("Reap: %d, %v", n, err)
	}
	if r.CQReady() != 0 {
		t.Error("CQReady on closed ring")
	}
	if err := r.RegisterFiles([]int32{0}); !errors.Is(err, ErrClosed) {
		t.Errorf("RegisterFiles: %v", err)
	}
	if _, err := r.Probe(); !errors.Is(err, ErrClosed) {
		t.Errorf("Probe: %v", err)
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	_ = r.Stats()
	if _, err := New(8, WithSQPoll(time.Second), WithAttachWQ(r)); !errors.Is(err, ErrClosed) {
		t.Errorf("attach to closed ring: %v", err)
	}
}

func TestBadSetup(t *testing.T) {
	// DEFER_TASKRUN is incompatible with SQPOLL: the kernel says EINVAL and
	// the error names the flags.
	_, err := New(8, WithSQPoll(time.Second), WithDeferTaskrun())
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("sqpoll+defer_taskrun: %v, want EINVAL", err)
	}
	t.Log(err)
}

func BenchmarkNop(b *testing.B) {
	r := newRing(b, 64)
	cqes := make([]CQE, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i += 32 {
		for j := 0; j < 32; j++ {
			r.GetSQE().PrepNop()
		}
		if _, err := r.SubmitAndWait(32); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < 32; {
			n, err := r.Reap(cqes)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}
}

// BenchmarkSubmitNoWait is one NOP per io_uring_enter that does not wait
// (Submit, then Reap: a NOP completes inside the submit). Such enters are
// raw syscalls (Ring.enter); this measures what one costs.
func BenchmarkSubmitNoWait(b *testing.B) {
	r := newRing(b, 8)
	cqes := make([]CQE, 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.GetSQE().PrepNop()
		if _, err := r.Submit(); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < 1; {
			n, err := r.Reap(cqes)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}
}

// TestSharedPollerOneThread checks that ATTACH_WQ shares the SQPOLL thread:
// two attached rings have one poller, an independent ring adds one. A new
// poller names itself iou-sqp-PID once it first runs, and pollers of rings
// closed earlier exit asynchronously, so counts are awaited.
func TestSharedPollerOneThread(t *testing.T) {
	count := func() int {
		p, err := PollerThreads(0)
		if err != nil {
			t.Fatal(err)
		}
		return len(p)
	}
	await := func(want int) int {
		deadline := time.Now().Add(5 * time.Second)
		got := count()
		for got != want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			got = count()
		}
		return got
	}
	if got := await(0); got != 0 {
		t.Fatalf("%d poller threads left from earlier rings", got)
	}
	a := newRing(t, 8, WithSQPoll(time.Second))
	b := newRing(t, 8, WithSQPoll(time.Second), WithAttachWQ(a))
	if got := await(1); got != 1 {
		t.Fatalf("two attached SQPOLL rings: %d poller threads, want 1", got)
	}
	time.Sleep(20 * time.Millisecond)
	if got := count(); got != 1 {
		t.Fatalf("two attached SQPOLL rings: %d poller threads, want 1", got)
	}
	newRing(t, 8, WithSQPoll(time.Second))
	if got := await(2); got != 2 {
		t.Fatalf("plus an independent SQPOLL ring: %d poller threads, want 2", got)
	}
	// Both attached rings make progress through the one poller.
	for _, r := range []*Ring{a, b} {
		r.GetSQE().PrepNop()
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		waitAll(t, r, 1)
	}
}

// TestDisabledSingleIssuer creates and registers a DEFER_TASKRUN ring on one
// goroutine and enables and uses it on another, locked to its thread.
func TestDisabledSingleIssuer(t *testing.T) {
	f := knownFile(t)
	r := newRing(t, 8, WithDisabled(), WithDeferTaskrun(), WithCoopTaskrun())
	mem := alignedBuf(t, blockSize)
	if err := r.RegisterBuffers([][]byte{mem}); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterFiles([]int32{int32(f.Fd())}); err != nil {
		t.Fatal(err)
	}
	// The NOP stays queued in the SQ and runs once the ring is enabled.
	r.GetSQE().PrepNop()
	if _, err := r.Submit(); !errors.Is(err, unix.EBADFD) {
		t.Fatalf("submit to a disabled ring: %v, want EBADFD", err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := r.Enable(); err != nil {
			errc <- err
			return
		}
		s := r.GetSQE()
		s.PrepReadFixed(0, mem, 3*blockSize, 0)
		s.SetFixedFile()
		s.UserData = 1
		if _, err := r.SubmitAndWait(2); err != nil {
			errc <- err
			return
		}
		var c [2]CQE
		if n := r.ReapNoEnter(c[:]); n != 2 {
			errc <- fmt.Errorf("%d completions, want the NOP and the read", n)
			return
		}
		for _, c := range c {
			if c.UserData == 1 && c.Res != blockSize {
				errc <- fmt.Errorf("read completion %+v", c)
				return
			}
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if r.Disabled() || mem[0] != pattern(3*blockSize) {
		t.Fatal("wrong bytes after enable")
	}
}
