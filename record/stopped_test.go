package record_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stoppedHints is how many hints the stopped-recorder test sends (issue 17).
const stoppedHints = 1_000_000

// TestHintsStoppedRecorder sends 1 M hints to a real `predictio record`
// process stopped with SIGSTOP, from a Go program (hints.Client) and from
// a C one (predictio_hints.h). The program must finish in about the time
// it takes with no recorder at all (measured first, in the same test; the
// bound is generous: a sender that waits for the recorder never finishes),
// and every drop must be counted on both sides: by the client at once, and
// by the recorder (manifest counters.dropped_hints) once it resumes and
// the client's drop report reaches it.
func TestHintsStoppedRecorder(t *testing.T) {
	tl := buildTools(t)
	data := filepath.Join(tl.dir, "index.db")
	if err := os.WriteFile(data, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	cSender := tl.cprog(t, "hintburst")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"go", "c"} {
		t.Run(lang, func(t *testing.T) {
			sender := func(sock string) *burst {
				cmd := exec.Command(cSender)
				if lang == "go" {
					cmd = exec.Command(exe)
				}
				cmd.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER=hintburst",
					"PREDICTIO_RECORD_SOCK="+sock, "PREDICTIO_RECORD_FILE="+data)
				return startBurst(t, lang+" sender", cmd)
			}
			testStoppedRecorder(t, tl, lang, sender)
		})
	}
}

func testStoppedRecorder(t *testing.T, tl *tools, lang string, sender func(sock string) *burst) {
	sock := filepath.Join(tl.dir, lang+".sock")
	// No recorder at all: nothing listens at the socket path.
	none := sender(sock)
	base := none.do(fmt.Sprintf("send %d", stoppedHints), 2*time.Minute)
	none.end()
	if base.none != stoppedHints || base.sent != 0 {
		t.Fatalf("no recorder: %+v, want all %d hints dropped as no_server", base, stoppedHints)
	}

	bundle := filepath.Join(tl.dir, lang+".bundle")
	rec := exec.Command(tl.predictio, "record", "-quiet", "-o", bundle, "--hints", "unix:"+sock, "--", "sleep", "3600")
	rec.Stdout, rec.Stderr = os.Stderr, os.Stderr
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Process.Signal(syscall.SIGCONT); rec.Process.Kill(); rec.Wait() })
	waitSocketFile(t, sock)
	snd := sender(sock)
	if err := rec.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, rec.Process.Pid)
	bound := 4*time.Duration(base.ns) + time.Second
	st := snd.do(fmt.Sprintf("send %d", stoppedHints), bound+30*time.Second)
	t.Logf("%s: 1 M hints in %v with no recorder, %v to a stopped one (%d queued, %d dropped)",
		lang, time.Duration(base.ns), time.Duration(st.ns), st.sent, st.full+st.none)
	if d := time.Duration(st.ns); d > bound {
		t.Errorf("1 M hints to a stopped recorder took %v, more than 4 × %v (no recorder) + 1 s", d, time.Duration(base.ns))
	}
	if st.sent+st.full != stoppedHints || st.none != 0 || st.full == 0 {
		t.Fatalf("stopped recorder: %+v; want sent + queue_full = %d, some dropped, no_server 0", st, stoppedHints)
	}

	if err := rec.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fl := snd.do("flush", time.Minute)
	if fl.reported != fl.full {
		t.Fatalf("after SIGCONT: %d of %d drops reported", fl.reported, fl.full)
	}
	snd.end()
	if err := rec.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := rec.Wait(); err != nil {
		t.Fatalf("predictio record: %v", err)
	}
	c, notes := manifestCounters(t, bundle)
	if want := fmt.Sprintf("record: senders dropped %d hints instead of blocking (queue_full %d, no_server 0;", st.full, st.full); !strings.Contains(strings.Join(notes, "\n"), want) {
		t.Errorf("manifest notes %q lack %q", notes, want)
	}
	if c.Hints+c.RejectedHints != st.sent {
		t.Errorf("recorder received %d hints (+ %d rejected), the client queued %d", c.Hints, c.RejectedHints, st.sent)
	}
	if c.DroppedHints != st.full {
		t.Errorf("recorder learned of %d dropped hints, the client dropped %d", c.DroppedHints, st.full)
	}
}

func manifestCounters(t testing.TB, bundle string) (counters, []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(bundle, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Counters counters `json:"counters"`
		Notes    []string `json:"notes"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s/manifest.json: %v", bundle, err)
	}
	return m.Counters, m.Notes
}

// waitSocketFile waits for the recorder to create its hint socket (the
// first start on a kernel builds the BTF cache: seconds).
func waitSocketFile(t testing.TB, sock string) {
	t.Helper()
	for range 3000 {
		if st, err := os.Stat(sock); err == nil && st.Mode()&os.ModeSocket != 0 && dialable(sock) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("hint socket %s never appeared", sock)
}

// dialable reports whether a datagram socket connects to sock: bind(2)
// creates the file before the socket can be found through it.
func dialable(sock string) bool {
	c, err := net.Dial("unixgram", sock)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// burst drives a hintburst sender (tracetest's Go helper or
// testdata/hintburst.c).
type burst struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  chan string
}

type burstStats struct {
	ns                         int64
	sent, full, none, reported uint64
}

func startBurst(t *testing.T, name string, cmd *exec.Cmd) *burst {
	t.Helper()
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	b := &burst{t: t, name: name, cmd: cmd, in: in, out: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			b.out <- sc.Text()
		}
		close(b.out)
	}()
	if l := b.line(30 * time.Second); l != "ready" {
		t.Fatalf("%s: %q", name, l)
	}
	return b
}

func (b *burst) line(timeout time.Duration) string {
	b.t.Helper()
	select {
	case l, ok := <-b.out:
		if !ok {
			b.t.Fatalf("%s exited", b.name)
		}
		return l
	case <-time.After(timeout):
		b.t.Fatalf("%s: no answer within %v", b.name, timeout)
	}
	return ""
}

func (b *burst) do(cmd string, timeout time.Duration) burstStats {
	b.t.Helper()
	io.WriteString(b.in, cmd+"\n")
	l := b.line(timeout)
	var s burstStats
	if _, err := fmt.Sscanf(l, "ns=%d sent=%d full=%d none=%d reported=%d", &s.ns, &s.sent, &s.full, &s.none, &s.reported); err != nil {
		b.t.Fatalf("%s answered %q: %v", b.name, l, err)
	}
	return s
}

// end closes the sender's stdin and waits for it to exit.
func (b *burst) end() {
	b.t.Helper()
	b.in.Close()
	if err := b.cmd.Wait(); err != nil {
		b.t.Fatalf("%s: %v", b.name, err)
	}
}
