// Package uring is a small io_uring binding on golang.org/x/sys/unix.
//
// It wraps the three io_uring syscalls (io_uring_setup, io_uring_enter and
// io_uring_register, numbers 425–427 on x86-64), maps the submission and
// completion rings (with IORING_FEAT_SINGLE_MMAP when the kernel offers it),
// and exposes the SQE and CQE layouts, opcode probing, registered buffers
// and files, and the setup flags predictio uses: SQPOLL (with sq_thread_idle
// and sq_thread_cpu), ATTACH_WQ, SINGLE_ISSUER, COOP_TASKRUN, DEFER_TASKRUN
// and CQSIZE. Needs Linux 5.6 (IORING_OP_READ, IORING_REGISTER_PROBE);
// individual options state their own minimums.
//
// # Use
//
//	r, err := uring.New(64)                       // or uring.New(64, uring.WithSQPoll(time.Second))
//	defer r.Close()
//	sqe := r.GetSQE()                              // nil when the SQ is full
//	sqe.PrepRead(int32(f.Fd()), buf, 4096)         // len(buf) bytes at offset 4096
//	sqe.UserData = 7
//	r.SubmitAndWait(1)                             // one io_uring_enter (none with an awake SQPOLL thread)
//	var cqes [8]uring.CQE
//	n, err := r.Reap(cqes[:])                      // non-blocking copy-out of completions
//	if err := cqes[0].Err(); err != nil { ... }    // negated errno -> unix.Errno
//
// A Ring is owned by one goroutine: GetSQE, Submit, SubmitAndWait and Reap
// must not run concurrently on the same Ring. Stats may be read from any
// goroutine. Rings created with WithSingleIssuer or WithDeferTaskrun must be
// created and used by a goroutine that has called runtime.LockOSThread,
// because the kernel ties them to one thread (task).
//
// Buffers passed to PrepRead and PrepWrite must stay reachable and must not
// move until their completion has been reaped; predictio passes memory from
// unix.Mmap, which the Go garbage collector never touches.
//
// # Exact syscall counts
//
// Every io_uring_enter the package makes is counted in Stats.Enters (split
// into submit, wait and SQPOLL-wakeup calls), so syscalls per operation are
// exact rather than the upper bound the ringio paper had to report. With
// SQPOLL, Submit publishes the SQ tail with an atomic store, then loads the
// SQ flags and enters the kernel only when IORING_SQ_NEED_WAKEUP is set.
//
// # Errors
//
// Per-request failures come back in the CQE as a negated errno: CQE.Err
// returns it as a unix.Errno and OpError wraps it with the operation and the
// file name. Ring-level failures (setup, enter, register) are returned
// wrapped with the action. After Close every method returns ErrClosed (or
// nil from GetSQE) instead of touching the unmapped rings.
package uring
