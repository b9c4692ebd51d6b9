package hints

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stoppedHints is how many hints the SIGSTOP test sends (issue 17: 1 M).
const stoppedHints = 1_000_000

// TestNeverBlocksStoppedRecorder sends 1 M hints to a receiver process
// stopped with SIGSTOP, from a Go and from a C program. A blocking send
// would wait for the receiver forever; a non-blocking one finishes in about
// the time the same program takes with nothing listening at all (measured
// first, in the same test), drops what the queue cannot hold, and counts
// every drop on both sides: in the client at once, and in the receiver
// from the drop report sent once the receiver resumes.
func TestNeverBlocksStoppedRecorder(t *testing.T) {
	for _, lang := range []string{"go", "c"} {
		t.Run(lang, func(t *testing.T) { testStopped(t, lang) })
	}
}

func testStopped(t *testing.T, lang string) {
	dir := t.TempDir()
	// Nothing listening: the program's own cost of sending (and failing).
	none := startSender(t, lang, filepath.Join(dir, "absent.sock"), true, 0)
	base := none.do("send 1000000", 2*time.Minute)
	none.do("close", 10*time.Second)
	if base.none != stoppedHints || base.sent != 0 {
		t.Fatalf("no listener: %+v, want all %d dropped as no_server", base, stoppedHints)
	}

	sock := filepath.Join(dir, "h.sock")
	recv := startReceiver(t, sock)
	snd := startSender(t, lang, sock, false, 0)
	recv.stop()
	// Generous: the bound fails a sender that waits for the receiver
	// (it would never finish), not one that is a little slower.
	bound := 4*time.Duration(base.ns) + time.Second
	st := snd.do("send 1000000", bound+10*time.Second)
	t.Logf("%s: 1 M hints in %v with nothing listening, %v to a stopped receiver (%d queued, %d dropped)",
		lang, time.Duration(base.ns), time.Duration(st.ns), st.sent, st.dropped())
	if d := time.Duration(st.ns); d > bound {
		t.Errorf("1 M hints to a stopped receiver took %v, more than 4 × %v (nothing listening) + 1 s", d, time.Duration(base.ns))
	}
	if st.sent+st.full != stoppedHints || st.none != 0 {
		t.Fatalf("stopped receiver: %+v; want sent + queue_full = %d, no_server 0", st, stoppedHints)
	}
	if st.full == 0 {
		t.Fatalf("stopped receiver: no hint dropped (%+v); its queue cannot hold 1 M", st)
	}

	if err := recv.cmd.Process.Signal(unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	after := snd.do("trickle", 30*time.Second)
	if after.reported != after.dropped() {
		t.Fatalf("after SIGCONT: %d of %d drops reported", after.reported, after.dropped())
	}
	end := snd.do("close", 10*time.Second)
	got := recv.finish(sock)
	if got.bad != 0 {
		t.Errorf("receiver: %d datagrams that do not decode", got.bad)
	}
	if got.hints != end.sent || got.full != end.full || got.none != end.none {
		t.Errorf("receiver counted %+v; sender sent %d, dropped %d (queue full) + %d (no server)",
			got, end.sent, end.full, end.none)
	}
	if attempted := uint64(stoppedHints) + (end.sent + end.dropped() - st.sent - st.dropped()); got.hints+got.full+got.none != attempted {
		t.Errorf("received %d + reported dropped %d = %d, want the %d hints sent", got.hints, got.full+got.none,
			got.hints+got.full+got.none, attempted)
	}
}

// TestReconnect kills the receiver (SIGKILL), sends hints while nothing
// listens, starts a new receiver on the same path and checks that the
// client reconnects by itself and tells the new receiver how many hints it
// dropped while there was none.
func TestReconnect(t *testing.T) {
	for _, lang := range []string{"go", "c"} {
		t.Run(lang, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "h.sock")
			r1 := startReceiver(t, sock)
			snd := startSender(t, lang, sock, false, 20)
			if s := snd.do("send 10", 10*time.Second); s.sent != 10 {
				t.Fatalf("first receiver: %+v", s)
			}
			r1.cmd.Process.Kill()
			r1.cmd.Wait()
			gone := snd.do("send 1000", 10*time.Second)
			if gone.sent != 10 || gone.none != 1000 {
				t.Fatalf("no receiver: %+v, want 1000 dropped as no_server", gone)
			}
			r2 := startReceiver(t, sock)
			// Flush reconnects too: the drops reach the new receiver
			// before any new hint.
			back := snd.do("flush", 30*time.Second)
			if back.reconnects == 0 || back.reported != back.dropped() {
				t.Fatalf("after the receiver restarted: %+v; the client did not reconnect and report", back)
			}
			if back = snd.do("send 10", 10*time.Second); back.sent != 20 {
				t.Fatalf("after the receiver restarted: %+v, want 10 more hints sent", back)
			}
			end := snd.do("close", 10*time.Second)
			got := r2.finish(sock)
			if got.hints != 10 || got.none != 1000 || got.full != 0 {
				t.Errorf("second receiver counted %+v; sender: %+v (10 hints went to the first)", got, end)
			}
		})
	}
}

// TestConcurrentSendersExact sends from 4 threads of one program (Go
// goroutines, C pthreads) on one client to a receiver that cannot keep up,
// and checks that the counts stay exact under contention: every hint is
// either received or reported dropped, once.
func TestConcurrentSendersExact(t *testing.T) {
	for _, lang := range []string{"go", "c"} {
		t.Run(lang, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "h.sock")
			recv := startReceiver(t, sock)
			snd := startSender(t, lang, sock, false, 0, "PIO_HINTS_TEST_THREADS=4")
			const n = 200_000
			st := snd.do("send 200000", time.Minute)
			if st.sent+st.dropped() != n || st.none != 0 {
				t.Fatalf("sender: %+v, want sent + dropped = %d", st, n)
			}
			if st.full == 0 {
				t.Logf("no hint dropped: the receiver kept up with 4 senders (%+v)", st)
			}
			if st = snd.do("flush", 30*time.Second); st.reported != st.dropped() {
				t.Fatalf("after flush: %+v", st)
			}
			snd.do("close", 10*time.Second)
			got := recv.finish(sock)
			if got.hints != st.sent || got.full != st.full || got.none != 0 || got.bad != 0 {
				t.Errorf("receiver counted %+v; sender %+v", got, st)
			}
		})
	}
}

// TestReconnectRateLimited sends hints to a path where nothing listens for
// 200 ms and checks that the client tried to connect at most once per
// ReconnectInterval (each send would try otherwise).
func TestReconnectRateLimited(t *testing.T) {
	const interval = 20 * time.Millisecond
	c, err := Dialer{Lazy: true, ReconnectInterval: interval}.Dial(filepath.Join(t.TempDir(), "absent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	n := 0
	for time.Since(start) < 200*time.Millisecond {
		if err := c.LayerStart(Path("/m"), 1); err != nil {
			t.Fatal(err)
		}
		n++
	}
	el := time.Since(start)
	if max := int(el/interval) + 1; c.tries > max || c.tries < 2 {
		t.Errorf("%d reconnect attempts in %v for %d hints, want 2..%d", c.tries, el, n, max)
	}
	if s := c.Stats(); s.NoServer != uint64(n) || s.Sent != 0 {
		t.Errorf("stats %+v, want %d no_server drops", s, n)
	}
}

// TestFlush fills a socket nobody reads, checks that Flush fails at once
// with EAGAIN while the queue is full, and succeeds once it drains.
func TestFlush(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	rfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	if err := unix.Bind(rfd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Flush(); err != nil {
		t.Fatalf("flush with nothing dropped: %v", err)
	}
	for c.Dropped() == 0 {
		if err := c.LayerStart(Path("/m"), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("flush into a full queue: %v, want EAGAIN", err)
	}
	buf := make([]byte, MaxDatagram)
	var m Message
	var hints uint64
	for {
		n, err := unix.Read(rfd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if Decode(buf[:n], &m) == nil && m.Kind == KindDropReport {
			t.Fatalf("a drop report was queued while the queue was full: %+v", m)
		}
		hints++
		if hints == c.Stats().Sent {
			break
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("flush into a drained queue: %v", err)
	}
	n, err := unix.Read(rfd, buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := Decode(buf[:n], &m); err != nil || m.Kind != KindDropReport || m.QueueFull != c.Dropped() || m.NoServer != 0 {
		t.Fatalf("after flush: %+v (%v), want a drop report of %d", m, err, c.Dropped())
	}
	if s := c.Stats(); s.Reported != s.Dropped() {
		t.Errorf("stats after flush: %+v", s)
	}
}

func TestDialErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Dial(filepath.Join(dir, "absent.sock")); !errors.Is(err, unix.ENOENT) {
		t.Errorf("dial a missing socket: %v, want ENOENT", err)
	}
	long := "/" + string(make([]byte, 200))
	if _, err := (Dialer{Lazy: true}).Dial(long); !errors.Is(err, unix.ENAMETOOLONG) {
		t.Errorf("dial a 201-byte path lazily: %v, want ENAMETOOLONG", err)
	}
	if _, err := (Dialer{ReconnectInterval: -1}).Dial(filepath.Join(dir, "x")); err == nil {
		t.Error("negative reconnect interval accepted")
	}
	c, err := Dialer{Lazy: true}.Dial(filepath.Join(dir, "absent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.TensorLayout(File{fd: -1}, "w", 0, 1); !errors.Is(err, ErrMalformed) {
		t.Errorf("hint without a file: %v", err)
	}
	c.Close()
	if err := c.LayerStart(Path("/m"), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("send after Close: %v, want ErrClosed", err)
	}
}

// TestSendAllocs checks that sending allocates nothing per hint, whether
// the hint is queued (a receiver drains the socket) or dropped, by path or
// with a descriptor.
func TestSendAllocs(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	rfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(rfd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go drain(rfd, done)
	defer func() { unix.Shutdown(rfd, unix.SHUT_RDWR); <-done; unix.Close(rfd) }()
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := os.Open("client.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kids := []uint64{1, 2, 3}
	path, fd := Path("/data/index.db"), FD(f)
	for name, send := range map[string]func(){
		"path": func() { _ = c.TreeChildEnter(path, 1, 0, kids) },
		"fd":   func() { _ = c.TensorLayout(fd, "w", 0, 4096) },
	} {
		send()
		if n := testing.AllocsPerRun(1000, send); n != 0 {
			t.Errorf("%s hint: %v allocations per send", name, n)
		}
	}
	if s := c.Stats(); s.Sent == 0 {
		t.Errorf("no hint was queued: %+v", s)
	}
}

// drain receives datagrams without allocating and closes passed fds.
func drain(fd int, done chan struct{}) {
	defer close(done)
	buf := make([]byte, MaxDatagram)
	oob := make([]byte, 64)
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	for {
		var m unix.Msghdr
		m.Iov, m.Iovlen = &iov, 1
		m.Control = &oob[0]
		m.SetControllen(len(oob))
		n, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&m)), unix.MSG_CMSG_CLOEXEC)
		if e == unix.EINTR {
			continue
		}
		if e != 0 || n == 0 { // shut down
			return
		}
		if m.Controllen >= uint64(unix.CmsgLen(4)) {
			h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
			if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_RIGHTS {
				unix.Close(int(*(*int32)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))))
			}
		}
	}
}

func TestDropReportWire(t *testing.T) {
	b := AppendDropReport(nil, 5, 1<<40)
	if len(b) != HeaderSize+16 {
		t.Fatalf("drop_report is %d bytes", len(b))
	}
	var m Message
	if err := Decode(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindDropReport || m.QueueFull != 5 || m.NoServer != 1<<40 || m.Path != nil {
		t.Fatalf("decoded %+v", m)
	}
	bad := append([]byte(nil), b...)
	bad[6] = byte(FlagFD)
	if err := Decode(bad, &m); !errors.Is(err, ErrMalformed) {
		t.Errorf("drop_report with FD flag: %v", err)
	}
	long := AppendDropReport(nil, 1, 2)
	long = append(long, 0)
	long[8]++ // payload_len 17
	if err := Decode(long, &m); !errors.Is(err, ErrMalformed) {
		t.Errorf("drop_report with a trailing byte: %v", err)
	}
}
