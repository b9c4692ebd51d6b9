package record

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHintServeStopsUnderLoad checks that stop ends serve while a client
// keeps sending: the receive timeout never fires then, so serve must check
// for stop between batches too, or the recording never finishes.
func TestHintServeStopsUnderLoad(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hints.sock")
	r := &recorder{out: &memSink{}}
	s, err := newHintServer(sock, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	served := make(chan struct{})
	go func() { s.serve(); close(served) }()

	var quit atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		to := &unix.SockaddrUnix{Name: sock}
		for !quit.Load() {
			_ = unix.Sendto(fd, []byte("not a hint"), unix.MSG_DONTWAIT, to)
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { quit.Store(true); wg.Wait() }()

	time.Sleep(200 * time.Millisecond)
	s.stop()
	select {
	case <-served:
	case <-time.After(2 * time.Second):
		quit.Store(true)
		<-served
		t.Fatal("serve kept running for 2s after stop while a client was sending")
	}
	if s.rejects().Total() == 0 {
		t.Fatal("no datagram was rejected; the sender never reached the server")
	}
}

// TestHintPathCheckPerSender checks that a cached "readable" verdict for one
// sender is not reused for another sender with the same uid but a gid that
// may not read the file.
func TestHintPathCheckPerSender(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_CHOWN) to give the test file another group")
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "group-only")
	if err := os.WriteFile(f, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	const uid, gid, other = 4242, 4343, 4444
	if err := os.Chown(f, 0, gid); err != nil {
		t.Fatal(err)
	}
	r := &recorder{out: &memSink{}, files: newFileTable(filter{}, nil, "")}
	s, err := newHintServer(filepath.Join(dir, "hints.sock"), r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	pid := int32(os.Getpid())
	if _, rej := s.checkPath(&unix.Ucred{Pid: pid, Uid: uid, Gid: gid}, []byte(f)); rej >= 0 {
		t.Fatalf("uid %d gid %d: rejected (%d), want readable", uid, gid, rej)
	}
	if _, rej := s.checkPath(&unix.Ucred{Pid: pid, Uid: uid, Gid: other}, []byte(f)); rej != rejUnreadable {
		t.Fatalf("uid %d gid %d: got %d, want rejUnreadable (%d)", uid, other, rej, rejUnreadable)
	}
}
