package hints

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests run senders and receivers as separate processes: this test
// binary re-executed (role in PIO_HINTS_TEST_ROLE) or a C program compiled
// from cSender, so that a receiver can be stopped with SIGSTOP or killed.

const roleEnv = "PIO_HINTS_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "receiver":
		os.Exit(receiverMain(os.Getenv("PIO_HINTS_TEST_SOCK")))
	case "sender":
		os.Exit(senderMain())
	}
	os.Exit(m.Run())
}

// endMark is the datagram that ends a receiver; it is not a valid hint.
const endMark = "END"

// receiverMain binds sock, prints "ready", and counts what arrives until
// endMark: hints, the counts of drop_report datagrams, and datagrams that
// do not decode. Passed descriptors are closed.
func receiverMain(sock string) int {
	os.Remove(sock)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrUnix{Name: sock})
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready")
	buf := make([]byte, MaxDatagram+1)
	oob := make([]byte, 256)
	var m Message
	var hints, full, none, bad uint64
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		closeRights(oob[:oobn])
		if string(buf[:n]) == endMark {
			break
		}
		switch {
		case Decode(buf[:n], &m) != nil:
			bad++
		case m.Kind == KindDropReport:
			full += m.QueueFull
			none += m.NoServer
		default:
			hints++
		}
	}
	fmt.Printf("hints=%d full=%d none=%d bad=%d\n", hints, full, none, bad)
	return 0
}

func closeRights(oob []byte) {
	cms, _ := unix.ParseSocketControlMessage(oob)
	for i := range cms {
		fds, _ := unix.ParseUnixRights(&cms[i])
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

// senderMain is the Go sender (the protocol of cSender): it dials
// PIO_HINTS_TEST_SOCK (lazily when PIO_HINTS_TEST_LAZY=1, reconnecting at
// most every PIO_HINTS_TEST_RECONNECT_MS) and answers each line on stdin
// with one line of stats:
//
//	send N    send N tree_child_enter hints; ns= is the time they took
//	trickle   one hint per millisecond until every drop is reported (10 s at most)
//	flush     Flush every millisecond until it succeeds (10 s at most)
//	close     Close, then exit
func senderMain() int {
	ms, _ := strconv.Atoi(os.Getenv("PIO_HINTS_TEST_RECONNECT_MS"))
	d := Dialer{Lazy: os.Getenv("PIO_HINTS_TEST_LAZY") == "1", ReconnectInterval: time.Duration(ms) * time.Millisecond}
	c, err := d.Dial(os.Getenv("PIO_HINTS_TEST_SOCK"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	f := Path("/data/index.db")
	kids := []uint64{10, 11, 12, 13}
	threads := max(1, atoi(os.Getenv("PIO_HINTS_TEST_THREADS")))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		start := time.Now()
		switch cmd {
		case "send":
			n, _ := strconv.Atoi(arg)
			if err := sendParallel(c, f, kids, n, threads); err != nil {
				fmt.Println("error", err)
				return 1
			}
		case "trickle":
			for s := c.Stats(); s.Reported < s.Dropped() && time.Since(start) < 10*time.Second; s = c.Stats() {
				if err := c.TreeChildEnter(f, 0, 1, kids); err != nil {
					fmt.Println("error", err)
					return 1
				}
				time.Sleep(time.Millisecond)
			}
		case "flush":
			for c.Flush() != nil && time.Since(start) < 10*time.Second {
				time.Sleep(time.Millisecond)
			}
		case "close":
			if err := c.Close(); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		s := c.Stats()
		fmt.Printf("ns=%d sent=%d full=%d none=%d reported=%d reconnects=%d\n",
			time.Since(start).Nanoseconds(), s.Sent, s.QueueFull, s.NoServer, s.Reported, s.Reconnects)
		if cmd == "close" {
			return 0
		}
	}
	return 0
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// sendParallel sends n hints from threads goroutines on one Client.
func sendParallel(c *Client, f File, kids []uint64, n, threads int) error {
	errs := make(chan error, threads)
	for t := range threads {
		go func() {
			var err error
			for i := t; i < n && err == nil; i += threads {
				err = c.TreeChildEnter(f, uint64(i), 1, kids)
			}
			errs <- err
		}()
	}
	var first error
	for range threads {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// cSender is senderMain in C, against predictio_hints.h.
const cSender = `#include "predictio_hints.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static struct pio_hints *h;
static long total, nthreads = 1;
static uint64_t kids[] = {10, 11, 12, 13};
static void *sendall(void *arg) {
	for (long i = (long)(intptr_t)arg; i < total; i += nthreads)
		if (pio_tree_child_enter(h, "/data/index.db", -1, (uint64_t)i, 1, kids, 4))
			return (void *)(intptr_t)errno;
	return NULL;
}
static void stats(struct pio_hints *h, int64_t ns) {
	struct pio_hints_stats s;
	pio_hints_get_stats(h, &s);
	printf("ns=%lld sent=%llu full=%llu none=%llu reported=%llu reconnects=%llu\n", (long long)ns,
	       (unsigned long long)s.sent, (unsigned long long)s.queue_full, (unsigned long long)s.no_server,
	       (unsigned long long)s.reported, (unsigned long long)s.reconnects);
	fflush(stdout);
}
int main(void) {
	const char *sock = getenv("PIO_HINTS_TEST_SOCK");
	const char *lazy = getenv("PIO_HINTS_TEST_LAZY");
	h = lazy && lazy[0] == '1' ? pio_hints_open(sock) : pio_hints_dial(sock);
	if (!h) { printf("error dial %s: %s\n", sock, strerror(errno)); return 1; }
	const char *ms = getenv("PIO_HINTS_TEST_RECONNECT_MS");
	if (ms && atoi(ms) > 0) pio_hints_set_reconnect_ms(h, (unsigned)atoi(ms));
	const char *th = getenv("PIO_HINTS_TEST_THREADS");
	if (th && atol(th) > 1) nthreads = atol(th);
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		int64_t start = pio__now();
		if (!strncmp(line, "send ", 5)) {
			pthread_t t[64];
			total = atol(line + 5);
			for (long i = 0; i < nthreads && i < 64; i++)
				pthread_create(&t[i], NULL, sendall, (void *)(intptr_t)i);
			for (long i = 0; i < nthreads && i < 64; i++) {
				void *e;
				pthread_join(t[i], &e);
				if (e) { printf("error send: %s\n", strerror((int)(intptr_t)e)); return 1; }
			}
		} else if (!strncmp(line, "trickle", 7)) {
			struct pio_hints_stats s;
			struct timespec ms1 = {0, 1000000};
			for (pio_hints_get_stats(h, &s); s.reported < s.queue_full + s.no_server &&
			     pio__now() - start < 10000000000LL; pio_hints_get_stats(h, &s)) {
				if (pio_tree_child_enter(h, "/data/index.db", -1, 0, 1, kids, 4)) {
					printf("error send: %s\n", strerror(errno));
					return 1;
				}
				nanosleep(&ms1, NULL);
			}
		} else if (!strncmp(line, "flush", 5)) {
			struct timespec ms1 = {0, 1000000};
			while (pio_hints_flush(h) && pio__now() - start < 10000000000LL)
				nanosleep(&ms1, NULL);
		} else if (!strncmp(line, "close", 5)) {
			/* h is freed by close: print the counts it had before. */
			struct pio_hints_stats s;
			pio_hints_get_stats(h, &s);
			if (pio_hints_close(h)) { printf("error close: %s\n", strerror(errno)); return 1; }
			printf("ns=%lld sent=%llu full=%llu none=%llu reported=%llu reconnects=%llu\n",
			       (long long)(pio__now() - start), (unsigned long long)s.sent,
			       (unsigned long long)s.queue_full, (unsigned long long)s.no_server,
			       (unsigned long long)s.reported, (unsigned long long)s.reconnects);
			return 0;
		}
		stats(h, pio__now() - start);
	}
	return 0;
}
`

var cBuild struct {
	once sync.Once
	bin  string
	err  error
}

// cCompiler returns gcc, cc or clang, skipping the test when none exists.
func cCompiler(t *testing.T) string {
	t.Helper()
	for _, cc := range []string{"gcc", "cc", "clang"} {
		if p, err := exec.LookPath(cc); err == nil {
			return p
		}
	}
	t.Skip("no C compiler: none of gcc, cc, clang in PATH (scripts/setup.sh installs clang)")
	return ""
}

// compileC compiles src against predictio_hints.h into dir/name.
func compileC(t *testing.T, dir, name, src string) string {
	t.Helper()
	cc := cCompiler(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if out, err := exec.Command(cc, "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-O2", "-pthread", "-I", wd, "-o", bin, c).CombinedOutput(); err != nil {
		t.Fatalf("compile %s: %v\n%s", name, err, out)
	}
	return bin
}

// cSenderBin compiles cSender once per test binary.
func cSenderBin(t *testing.T) string {
	t.Helper()
	cCompiler(t)
	cBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "pio-hints-c-")
		if err != nil {
			cBuild.err = err
			return
		}
		cBuild.bin = compileC(t, dir, "sender", cSender)
	})
	if cBuild.err != nil || cBuild.bin == "" {
		t.Fatalf("build C sender: %v", cBuild.err)
	}
	return cBuild.bin
}

// proc is a sender or receiver child process driven by lines.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  chan string
}

func startProc(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{t: t, name: name, cmd: cmd, in: in, out: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.out <- sc.Text()
		}
		close(p.out)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	return p
}

// line waits up to timeout for the process's next output line.
func (p *proc) line(timeout time.Duration) string {
	p.t.Helper()
	select {
	case l, ok := <-p.out:
		if !ok {
			p.t.Fatalf("%s exited without answering", p.name)
		}
		if strings.HasPrefix(l, "error") {
			p.t.Fatalf("%s: %s", p.name, l)
		}
		return l
	case <-time.After(timeout):
		p.t.Fatalf("%s: no answer within %v", p.name, timeout)
	}
	return ""
}

// senderStats is one answer of a sender.
type senderStats struct {
	ns                                     int64
	sent, full, none, reported, reconnects uint64
}

func (s senderStats) dropped() uint64 { return s.full + s.none }

func startSender(t *testing.T, lang, sock string, lazy bool, reconnectMS int, env ...string) *proc {
	t.Helper()
	var cmd *exec.Cmd
	if lang == "c" {
		cmd = exec.Command(cSenderBin(t))
	} else {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(exe)
	}
	l := "0"
	if lazy {
		l = "1"
	}
	cmd.Env = append(os.Environ(), roleEnv+"=sender", "PIO_HINTS_TEST_SOCK="+sock,
		"PIO_HINTS_TEST_LAZY="+l, "PIO_HINTS_TEST_RECONNECT_MS="+strconv.Itoa(reconnectMS))
	cmd.Env = append(cmd.Env, env...)
	return startProc(t, lang+" sender", cmd)
}

// do sends a command to a sender and parses its answer.
func (p *proc) do(cmd string, timeout time.Duration) senderStats {
	p.t.Helper()
	if _, err := io.WriteString(p.in, cmd+"\n"); err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
	l := p.line(timeout)
	var s senderStats
	if _, err := fmt.Sscanf(l, "ns=%d sent=%d full=%d none=%d reported=%d reconnects=%d",
		&s.ns, &s.sent, &s.full, &s.none, &s.reported, &s.reconnects); err != nil {
		p.t.Fatalf("%s answered %q: %v", p.name, l, err)
	}
	return s
}

// receiverStats is what a receiver counted.
type receiverStats struct{ hints, full, none, bad uint64 }

func startReceiver(t *testing.T, sock string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"=receiver", "PIO_HINTS_TEST_SOCK="+sock)
	p := startProc(t, "receiver", cmd)
	if l := p.line(10 * time.Second); l != "ready" {
		t.Fatalf("receiver: %q", l)
	}
	return p
}

// finish ends a receiver with endMark and returns its counts. The
// socket's queue is FIFO, so everything sent before is counted.
func (p *proc) finish(sock string) receiverStats {
	p.t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, []byte(endMark), 0, &unix.SockaddrUnix{Name: sock}); err != nil {
		p.t.Fatalf("end receiver: %v", err)
	}
	l := p.line(30 * time.Second)
	var r receiverStats
	if _, err := fmt.Sscanf(l, "hints=%d full=%d none=%d bad=%d", &r.hints, &r.full, &r.none, &r.bad); err != nil {
		p.t.Fatalf("receiver answered %q: %v", l, err)
	}
	p.cmd.Wait()
	return r
}

// stop sends SIGSTOP and waits until the kernel shows the process stopped.
func (p *proc) stop() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		p.t.Fatal(err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	for range 1000 {
		b, err := os.ReadFile(stat)
		if err != nil {
			p.t.Fatal(err)
		}
		// pid (comm) S ...: the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
		time.Sleep(time.Millisecond)
	}
	p.t.Fatalf("%s not stopped 1 s after SIGSTOP", p.name)
}
