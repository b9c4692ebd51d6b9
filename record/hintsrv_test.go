package record

import (
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
