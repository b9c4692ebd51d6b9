package uring

import "fmt"

// Setup flags (io_uring_params.flags).
const (
	SetupIOPoll       uint32 = 1 << 0  // IORING_SETUP_IOPOLL
	SetupSQPoll       uint32 = 1 << 1  // IORING_SETUP_SQPOLL, Linux 5.1 (non-root 5.11)
	SetupSQAff        uint32 = 1 << 2  // IORING_SETUP_SQ_AFF, Linux 5.1
	SetupCQSize       uint32 = 1 << 3  // IORING_SETUP_CQSIZE, Linux 5.5
	SetupClamp        uint32 = 1 << 4  // IORING_SETUP_CLAMP, Linux 5.6
	SetupAttachWQ     uint32 = 1 << 5  // IORING_SETUP_ATTACH_WQ, Linux 5.6 (shares the SQPOLL thread since 5.12)
	SetupRDisabled    uint32 = 1 << 6  // IORING_SETUP_R_DISABLED, Linux 5.10
	SetupSubmitAll    uint32 = 1 << 7  // IORING_SETUP_SUBMIT_ALL, Linux 5.18
	SetupCoopTaskrun  uint32 = 1 << 8  // IORING_SETUP_COOP_TASKRUN, Linux 5.19
	SetupTaskrunFlag  uint32 = 1 << 9  // IORING_SETUP_TASKRUN_FLAG, Linux 5.19
	SetupSQE128       uint32 = 1 << 10 // IORING_SETUP_SQE128, Linux 5.19
	SetupCQE32        uint32 = 1 << 11 // IORING_SETUP_CQE32, Linux 5.19
	SetupSingleIssuer uint32 = 1 << 12 // IORING_SETUP_SINGLE_ISSUER, Linux 6.0
	SetupDeferTaskrun uint32 = 1 << 13 // IORING_SETUP_DEFER_TASKRUN, Linux 6.1
)

// Features reported by the kernel (io_uring_params.features).
const (
	FeatSingleMmap     uint32 = 1 << 0  // Linux 5.4: SQ and CQ rings share one mmap
	FeatNoDrop         uint32 = 1 << 1  // Linux 5.5: overflowed CQEs are kept, not dropped
	FeatSubmitStable   uint32 = 1 << 2  // Linux 5.5
	FeatRWCurPos       uint32 = 1 << 3  // Linux 5.6
	FeatCurPersonality uint32 = 1 << 4  // Linux 5.6
	FeatFastPoll       uint32 = 1 << 5  // Linux 5.7
	FeatPoll32Bits     uint32 = 1 << 6  // Linux 5.9
	FeatSQPollNonfixed uint32 = 1 << 7  // Linux 5.11: SQPOLL without fixed files
	FeatExtArg         uint32 = 1 << 8  // Linux 5.11
	FeatNativeWorkers  uint32 = 1 << 9  // Linux 5.12
	FeatRsrcTags       uint32 = 1 << 10 // Linux 5.13
	FeatCQESkip        uint32 = 1 << 11 // Linux 5.17
	FeatLinkedFile     uint32 = 1 << 12 // Linux 5.17
)

// io_uring_enter flags.
const (
	enterGetEvents uint32 = 1 << 0
	enterSQWakeup  uint32 = 1 << 1
	enterSQWait    uint32 = 1 << 2
)

// SQ ring flags (shared memory, written by the kernel).
const (
	sqNeedWakeup uint32 = 1 << 0 // IORING_SQ_NEED_WAKEUP
	sqCQOverflow uint32 = 1 << 1 // IORING_SQ_CQ_OVERFLOW
	sqTaskrun    uint32 = 1 << 2 // IORING_SQ_TASKRUN
)

// mmap offsets.
const (
	offSQRing int64 = 0
	offCQRing int64 = 0x8000000
	offSQEs   int64 = 0x10000000
)

// io_uring_register opcodes.
const (
	registerBuffers     = 0
	unregisterBuffers   = 1
	registerFiles       = 2
	unregisterFiles     = 3
	registerProbe       = 8
	registerEnableRings = 12
)

// SQE flags (SQE.Flags).
const (
	SQEFixedFile      uint8 = 1 << 0 // IOSQE_FIXED_FILE: Fd is an index into the registered files
	SQEIODrain        uint8 = 1 << 1 // IOSQE_IO_DRAIN
	SQEIOLink         uint8 = 1 << 2 // IOSQE_IO_LINK
	SQEIOHardlink     uint8 = 1 << 3 // IOSQE_IO_HARDLINK
	SQEAsync          uint8 = 1 << 4 // IOSQE_ASYNC
	SQEBufferSelect   uint8 = 1 << 5 // IOSQE_BUFFER_SELECT
	SQECQESkipSuccess uint8 = 1 << 6 // IOSQE_CQE_SKIP_SUCCESS, Linux 5.17
)

// Op is an io_uring opcode (SQE.Opcode).
type Op uint8

// Opcodes predictio uses, with the kernel that introduced them.
const (
	OpNop        Op = 0  // IORING_OP_NOP, Linux 5.1
	OpReadv      Op = 1  // IORING_OP_READV, Linux 5.1
	OpWritev     Op = 2  // IORING_OP_WRITEV, Linux 5.1
	OpFsync      Op = 3  // IORING_OP_FSYNC, Linux 5.1
	OpReadFixed  Op = 4  // IORING_OP_READ_FIXED, Linux 5.1
	OpWriteFixed Op = 5  // IORING_OP_WRITE_FIXED, Linux 5.1
	OpRead       Op = 22 // IORING_OP_READ, Linux 5.6
	OpWrite      Op = 23 // IORING_OP_WRITE, Linux 5.6
	OpFadvise    Op = 24 // IORING_OP_FADVISE, Linux 5.6
	OpMadvise    Op = 25 // IORING_OP_MADVISE, Linux 5.6
)

func (o Op) String() string {
	switch o {
	case OpNop:
		return "nop"
	case OpReadv:
		return "readv"
	case OpWritev:
		return "writev"
	case OpFsync:
		return "fsync"
	case OpReadFixed:
		return "read_fixed"
	case OpWriteFixed:
		return "write_fixed"
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFadvise:
		return "fadvise"
	case OpMadvise:
		return "madvise"
	}
	return fmt.Sprintf("op%d", uint8(o))
}
