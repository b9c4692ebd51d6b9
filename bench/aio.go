package bench

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux native AIO (the kernel side of libaio) through raw syscalls:
// io_setup, io_submit, io_getevents, io_destroy. Linux 2.6.

const (
	iocbCmdPread  = 0
	iocbCmdPwrite = 1
)

// iocb is struct iocb (64 bytes, little-endian x86-64 layout). The fields
// predictio never sets (aio_key, aio_rw_flags, aio_reqprio, aio_reserved2,
// aio_flags, aio_resfd) are blank: they stay zero and keep the layout.
type iocb struct {
	data   uint64
	_      uint32 // aio_key
	_      uint32 // aio_rw_flags
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	buf    uint64
	nbytes uint64
	offset int64
	_      uint64 // aio_reserved2
	_      uint32 // aio_flags
	_      uint32 // aio_resfd
}

// ioEvent is struct io_event (32 bytes).
type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

func init() {
	if unsafe.Sizeof(iocb{}) != 64 || unsafe.Sizeof(ioEvent{}) != 32 {
		panic("bench: iocb/io_event layout does not match the kernel ABI")
	}
}

type aioCtx uintptr

func ioSetup(n int) (aioCtx, error) {
	var ctx aioCtx
	_, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(n), uintptr(unsafe.Pointer(&ctx)), 0)
	if e != 0 {
		return 0, fmt.Errorf("io_setup(%d): %w", n, e)
	}
	return ctx, nil
}

func ioDestroy(ctx aioCtx) {
	unix.Syscall(unix.SYS_IO_DESTROY, uintptr(ctx), 0, 0)
}

// ioSubmit submits cbs. io_submit can block (for a free request tag when
// the device queue is full), so it tells the scheduler unless raw.
func ioSubmit(ctx aioCtx, cbs []*iocb, raw bool) (int, error) {
	var n uintptr
	var e unix.Errno
	if raw {
		n, _, e = unix.RawSyscall(unix.SYS_IO_SUBMIT, uintptr(ctx), uintptr(len(cbs)), uintptr(unsafe.Pointer(&cbs[0])))
	} else {
		n, _, e = unix.Syscall(unix.SYS_IO_SUBMIT, uintptr(ctx), uintptr(len(cbs)), uintptr(unsafe.Pointer(&cbs[0])))
	}
	if e == unix.EINTR || e == unix.EAGAIN {
		return 0, nil
	}
	if e != 0 {
		return 0, fmt.Errorf("io_submit: %w", e)
	}
	return int(n), nil
}

func ioGetevents(ctx aioCtx, min int, evs []ioEvent, raw bool) (int, error) {
	var n uintptr
	var e unix.Errno
	if raw {
		n, _, e = unix.RawSyscall6(unix.SYS_IO_GETEVENTS, uintptr(ctx), uintptr(min), uintptr(len(evs)), uintptr(unsafe.Pointer(&evs[0])), 0, 0)
	} else {
		n, _, e = unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(ctx), uintptr(min), uintptr(len(evs)), uintptr(unsafe.Pointer(&evs[0])), 0, 0)
	}
	if e == unix.EINTR {
		return 0, nil
	}
	if e != 0 {
		return 0, fmt.Errorf("io_getevents: %w", e)
	}
	return int(n), nil
}
