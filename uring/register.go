package uring

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

func (r *Ring) register(op, nr uintptr, arg unsafe.Pointer) error {
	if r.closed.Load() {
		return ErrClosed
	}
	for {
		r.stats.registers.Add(1)
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), op, uintptr(arg), nr, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// RegisterBuffers registers bufs as fixed buffers 0..len(bufs)-1 for
// PrepReadFixed and PrepWriteFixed; the kernel pins their pages once instead
// of per request. The memory must stay mapped until UnregisterBuffers or
// Close. Linux 5.1. Unlike the ring memory itself (charged to the memory
// cgroup since 5.12), the pinned pages still count against RLIMIT_MEMLOCK
// unless the ring was created by a task with CAP_IPC_LOCK; over the limit
// the kernel refuses with ENOMEM.
func (r *Ring) RegisterBuffers(bufs [][]byte) error {
	if len(bufs) == 0 {
		return fmt.Errorf("register io_uring buffers: no buffers")
	}
	iov := make([]unix.Iovec, len(bufs))
	for i, b := range bufs {
		if len(b) == 0 {
			return fmt.Errorf("register io_uring buffers: buffer %d is empty", i)
		}
		iov[i].Base = &b[0]
		iov[i].SetLen(len(b))
	}
	if err := r.register(registerBuffers, uintptr(len(iov)), unsafe.Pointer(&iov[0])); err != nil {
		if err == unix.ENOMEM {
			var n int
			for _, b := range bufs {
				n += len(b)
			}
			return fmt.Errorf("register %d io_uring buffers (%d bytes): %w (pinned buffers count against RLIMIT_MEMLOCK without CAP_IPC_LOCK: raise ulimit -l, run with CAP_IPC_LOCK or use fewer/smaller buffers)", len(bufs), n, err)
		}
		return fmt.Errorf("register %d io_uring buffers: %w", len(bufs), err)
	}
	return nil
}

// UnregisterBuffers drops the registered buffers. Linux 5.1.
func (r *Ring) UnregisterBuffers() error {
	if err := r.register(unregisterBuffers, 0, nil); err != nil {
		return fmt.Errorf("unregister io_uring buffers: %w", err)
	}
	return nil
}

// RegisterFiles registers fds as fixed files 0..len(fds)-1; an SQE with
// SetFixedFile then uses the index as its Fd and skips the per-request file
// lookup and reference counting. Linux 5.1.
func (r *Ring) RegisterFiles(fds []int32) error {
	if len(fds) == 0 {
		return fmt.Errorf("register io_uring files: no files")
	}
	if err := r.register(registerFiles, uintptr(len(fds)), unsafe.Pointer(&fds[0])); err != nil {
		return fmt.Errorf("register %d io_uring files: %w", len(fds), err)
	}
	return nil
}

// UnregisterFiles drops the registered files. Linux 5.1.
func (r *Ring) UnregisterFiles() error {
	if err := r.register(unregisterFiles, 0, nil); err != nil {
		return fmt.Errorf("unregister io_uring files: %w", err)
	}
	return nil
}

// Probe lists the opcodes the running kernel supports.
type Probe struct {
	LastOp Op
	ops    [256]bool
}

// Supported reports whether the kernel supports op.
func (p *Probe) Supported(op Op) bool { return p.ops[op] }

// Probe asks the kernel which opcodes it supports (IORING_REGISTER_PROBE).
// Linux 5.6.
func (r *Ring) Probe() (*Probe, error) {
	const nOps = 256
	// struct io_uring_probe: 16-byte header, then 8-byte io_uring_probe_op.
	buf := make([]byte, 16+nOps*8)
	if err := r.register(registerProbe, nOps, unsafe.Pointer(&buf[0])); err != nil {
		return nil, fmt.Errorf("probe io_uring opcodes: %w", err)
	}
	p := &Probe{LastOp: Op(buf[0])}
	opsLen := int(buf[1])
	for i := 0; i < opsLen && i < nOps; i++ {
		e := buf[16+i*8:]
		const supported = 1 // IO_URING_OP_SUPPORTED
		if e[2]&supported != 0 {
			p.ops[e[0]] = true
		}
	}
	return p, nil
}
