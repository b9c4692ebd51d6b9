package uring

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SQE is a submission queue entry (struct io_uring_sqe, 64 bytes). The
// union fields are named after their use here: Off is also addr2, OpFlags is
// rw_flags or fadvise_advice, FileIndex is also splice_fd_in.
type SQE struct {
	Opcode      Op
	Flags       uint8
	IOPrio      uint16
	Fd          int32
	Off         uint64
	Addr        uint64
	Len         uint32
	OpFlags     uint32
	UserData    uint64
	BufIndex    uint16
	Personality uint16
	FileIndex   uint32
	Addr3       uint64
	_           uint64
}

// CQE is a completion queue entry (struct io_uring_cqe, 16 bytes).
type CQE struct {
	UserData uint64
	// Res is the operation's result: bytes transferred, or a negated errno.
	Res   int32
	Flags uint32
}

func init() {
	if unsafe.Sizeof(SQE{}) != 64 || unsafe.Sizeof(CQE{}) != 16 {
		panic("uring: SQE/CQE layout does not match the kernel ABI")
	}
}

// Err returns the CQE's error as a unix.Errno, or nil when Res >= 0.
func (c *CQE) Err() error {
	if c.Res < 0 {
		return unix.Errno(-c.Res)
	}
	return nil
}

// OpError is a failed request: the operation, the file it was on, and the
// errno the kernel returned in the CQE.
type OpError struct {
	Op   Op
	File string
	Off  int64
	Err  error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("%s %s at offset %d: %v", e.Op, e.File, e.Off, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// ResultError returns nil when res >= 0, else an *OpError wrapping the
// negated errno res with op, file and off.
func ResultError(op Op, file string, off int64, res int32) error {
	if res >= 0 {
		return nil
	}
	return &OpError{Op: op, File: file, Off: off, Err: unix.Errno(-res)}
}

func bufAddr(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))
}

func (s *SQE) prepRW(op Op, fd int32, addr uint64, n uint32, off uint64) {
	*s = SQE{Opcode: op, Fd: fd, Addr: addr, Len: n, Off: off}
}

// PrepNop prepares a no-op. Linux 5.1.
func (s *SQE) PrepNop() { *s = SQE{Opcode: OpNop, Fd: -1} }

// PrepRead prepares a read of len(buf) bytes at off into buf. Linux 5.6.
func (s *SQE) PrepRead(fd int32, buf []byte, off uint64) {
	s.prepRW(OpRead, fd, bufAddr(buf), uint32(len(buf)), off)
}

// PrepWrite prepares a write of buf at off. Linux 5.6.
func (s *SQE) PrepWrite(fd int32, buf []byte, off uint64) {
	s.prepRW(OpWrite, fd, bufAddr(buf), uint32(len(buf)), off)
}

// PrepReadFixed prepares a read into buf, which must lie inside the
// registered buffer bufIndex. Linux 5.1.
func (s *SQE) PrepReadFixed(fd int32, buf []byte, off uint64, bufIndex uint16) {
	s.prepRW(OpReadFixed, fd, bufAddr(buf), uint32(len(buf)), off)
	s.BufIndex = bufIndex
}

// PrepWriteFixed prepares a write from buf, which must lie inside the
// registered buffer bufIndex. Linux 5.1.
func (s *SQE) PrepWriteFixed(fd int32, buf []byte, off uint64, bufIndex uint16) {
	s.prepRW(OpWriteFixed, fd, bufAddr(buf), uint32(len(buf)), off)
	s.BufIndex = bufIndex
}

// PrepFadvise prepares posix_fadvise(fd, off, n, advice), e.g.
// unix.FADV_WILLNEED. Linux 5.6.
func (s *SQE) PrepFadvise(fd int32, off uint64, n uint32, advice int) {
	s.prepRW(OpFadvise, fd, 0, n, off)
	s.OpFlags = uint32(advice)
}

// PrepMadvise prepares madvise(b, advice), e.g. unix.MADV_WILLNEED.
// Linux 5.6.
func (s *SQE) PrepMadvise(b []byte, advice int) {
	s.prepRW(OpMadvise, -1, bufAddr(b), uint32(len(b)), 0)
	s.OpFlags = uint32(advice)
}

// SetFixedFile marks the SQE's Fd as an index into the ring's registered
// files (IOSQE_FIXED_FILE). Call it after Prep*.
func (s *SQE) SetFixedFile() { s.Flags |= SQEFixedFile }
