package uring

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRegisterBuffersMemlock drops CAP_IPC_LOCK on one thread and registers
// more than RLIMIT_MEMLOCK: the kernel refuses with ENOMEM (registered
// buffers are still charged to RLIMIT_MEMLOCK on current kernels) and the
// error must say what to do.
func TestRegisterBuffersMemlock(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur == unix.RLIM_INFINITY || lim.Cur > 256<<20 {
		t.Skipf("RLIMIT_MEMLOCK is %d: too large to exceed in a test", lim.Cur)
	}
	size := int(lim.Cur) + 1<<20
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	errc := make(chan error, 1)
	go func() {
		// Capabilities are per thread: lock this goroutine to its thread
		// and never unlock, so the runtime discards the thread afterwards.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		if data[0].Effective&(1<<unix.CAP_IPC_LOCK) == 0 {
			errc <- errSkip
			return
		}
		data[0].Effective &^= 1 << unix.CAP_IPC_LOCK
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		r, err := New(4)
		if err != nil {
			errc <- err
			return
		}
		defer r.Close()
		errc <- r.RegisterBuffers([][]byte{mem})
	}()
	err = <-errc
	if errors.Is(err, errSkip) {
		t.Skip("no CAP_IPC_LOCK to drop: the limit applies already")
	}
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("kernel lacks io_uring: %v", err)
	}
	if !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("registering %d bytes over RLIMIT_MEMLOCK %d without CAP_IPC_LOCK: %v, want ENOMEM", size, lim.Cur, err)
	}
	if !strings.Contains(err.Error(), "RLIMIT_MEMLOCK") {
		t.Errorf("error does not say what to do: %v", err)
	}
	t.Log(err)
}

var errSkip = errors.New("skip")
