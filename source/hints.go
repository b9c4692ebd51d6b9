package source

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/hints"
)

// HintRejects counts hint datagrams the hint server skipped, by reason.
type HintRejects struct {
	Malformed     uint64 // bad magic, kind, flags or lengths
	Truncated     uint64 // shorter than its header or payload_len says
	Oversized     uint64 // larger than hints.MaxDatagram, or too many children / too long a name
	ForeignUID    uint64 // sender uid is not this process's, root's or one of Config.HintUIDs
	NoCredentials uint64 // no SCM_CREDENTIALS (cannot happen with SO_PASSCRED)
	Unreadable    uint64 // the sender may not read the named file
	BadFile       uint64 // the file does not exist, is not regular, or fds are missing
}

const (
	rejMalformed = iota
	rejTruncated
	rejOversized
	rejForeign
	rejNoCreds
	rejUnreadable
	rejBadFile
	nRej
)

// Total is the number of rejected hints.
func (h HintRejects) Total() uint64 {
	return h.Malformed + h.Truncated + h.Oversized + h.ForeignUID + h.NoCredentials + h.Unreadable + h.BadFile
}

// HintDrops are the hints senders dropped instead of blocking, as their
// drop_report datagrams told the server (docs/hints.md). Reports are
// accepted from the same senders as hints (the uid check); they are not
// hints and are counted in neither Stats.Hints nor HintRejects.
type HintDrops struct {
	QueueFull uint64 // the server's socket queue was full: it fell behind, was stopped or stuck
	NoServer  uint64 // nothing listened at the socket: before the server started, or while it restarted
}

// Total is the number of dropped hints.
func (d HintDrops) Total() uint64 { return d.QueueFull + d.NoServer }

// handle's results besides a rej* reason.
const (
	handledHint   = -1 // a hint, decoded into the row
	handledReport = -2 // a drop report, counted
)

// hintServer receives hints on a Unix datagram socket.
type hintServer struct {
	fd      int
	path    string
	src     *Source
	allowed map[uint32]bool

	accepted atomic.Uint64
	rej      [nRej]atomic.Uint64
	dropFull atomic.Uint64 // HintDrops.QueueFull
	dropNone atomic.Uint64 // HintDrops.NoServer
	quit     atomic.Bool
	cpu      atomic.Uint64 // CPU ns of the serving thread, set when serve returns

	// Used by the serve goroutine only.
	paths  map[credKey]map[string]pathCheck
	npaths int // entries in paths, at most maxPathChecks
	groups map[uint32]procGroupsAt
	// access checks paths with the kernel as the sender; nil where this
	// process cannot switch a thread's credentials (accessErr says why),
	// and the file's mode bits are used instead.
	access    *accessChecker
	accessErr error
}

// credKey is who sent a hint: the path check depends on the gid and (through
// the supplementary groups) the pid as well as the uid.
type credKey struct{ pid, uid, gid uint32 }

type procGroupsAt struct {
	groups []uint32
	at     time.Time
}

type pathCheck struct {
	entry *fileEntry
	rej   int // -1 when readable
	at    time.Time
}

// pathCheckTTL is how long a (uid, path) check is reused.
const pathCheckTTL = time.Second

// maxPathChecks bounds the path-check cache over all senders, so that
// neither a sender naming ever new paths nor many senders grow the
// server's memory (a full cache is emptied and refills).
const maxPathChecks = 65536

func newHintServer(path string, src *Source, uids []uint32) (*hintServer, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("open hint socket %s: exists and is not a socket", path)
		}
		os.Remove(path) // stale socket of an earlier recording
	}
	fd, err := deepDgramSocket()
	if err != nil {
		return nil, fmt.Errorf("open hint socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open hint socket %s: %w", path, err)
	}
	// Anyone may connect; the uid check decides what is accepted.
	_ = os.Chmod(path, 0o666)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open hint socket %s: SO_PASSCRED: %w", path, err)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	// Kernel arrival timestamps (CLOCK_REALTIME, converted to CLOCK_MONOTONIC
	// per batch), so batching receives does not blur when hints arrived.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	s := &hintServer{
		fd: fd, path: path, src: src,
		allowed: map[uint32]bool{0: true, uint32(os.Getuid()): true},
		paths:   make(map[credKey]map[string]pathCheck),
		groups:  make(map[uint32]procGroupsAt),
	}
	for _, u := range uids {
		s.allowed[u] = true
	}
	s.access, s.accessErr = newAccessChecker()
	return s, nil
}

// hintQueue is the datagram queue length the hint socket asks for.
const hintQueue = 512

const qlenSysctl = "/proc/sys/net/unix/max_dgram_qlen"

// deepDgramSocket creates a Unix datagram socket whose receive queue holds
// hintQueue datagrams. The kernel copies net.unix.max_dgram_qlen into a
// socket when it is created (default 10, which makes senders block after 10
// hints), so when it is lower and writable it is raised around the
// socket(2) call and restored right after.
func deepDgramSocket() (int, error) {
	old, err := os.ReadFile(qlenSysctl)
	cur, perr := strconv.Atoi(strings.TrimSpace(string(old)))
	raise := err == nil && perr == nil && cur < hintQueue &&
		os.WriteFile(qlenSysctl, []byte(strconv.Itoa(hintQueue)), 0) == nil
	fd, serr := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if raise {
		_ = os.WriteFile(qlenSysctl, old, 0)
	}
	return fd, serr
}

func (s *hintServer) stop() { s.quit.Store(true) }

func (s *hintServer) close() {
	unix.Close(s.fd)
	os.Remove(s.path)
	if s.access != nil {
		s.access.close()
	}
}

func (s *hintServer) rejects() HintRejects {
	return HintRejects{
		Malformed: s.rej[rejMalformed].Load(), Truncated: s.rej[rejTruncated].Load(),
		Oversized: s.rej[rejOversized].Load(), ForeignUID: s.rej[rejForeign].Load(),
		NoCredentials: s.rej[rejNoCreds].Load(), Unreadable: s.rej[rejUnreadable].Load(),
		BadFile: s.rej[rejBadFile].Load(),
	}
}

// clockOffset returns CLOCK_REALTIME - CLOCK_MONOTONIC in ns, from the
// tightest of a few bracketed readings, so that converted timestamps do not
// jitter by more than a few hundred ns.
func clockOffset() int64 {
	var best, bestGap int64 = 0, -1
	for range 5 {
		var a, rt, b unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		_ = unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		gap := b.Nano() - a.Nano()
		if bestGap < 0 || gap < bestGap {
			best, bestGap = rt.Nano()-(a.Nano()+gap/2), gap
		}
	}
	return best
}

const cmsgAlign = 8 // sizeof(long) on 64-bit Linux

func align(n int) int { return (n + cmsgAlign - 1) &^ (cmsgAlign - 1) }

// mmsghdr is struct mmsghdr (64-bit).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// hintBatch is how many datagrams one recvmmsg(2) may return.
const hintBatch = 32

// drainMax is how many datagrams serve still takes after stop: more than
// the socket queue holds (hintQueue), so that every hint and drop report
// queued before stop is counted, yet bounded, so that a sender that keeps
// sending cannot hold serve.
const drainMax = 2*hintQueue + hintBatch

// serve receives datagrams until stop, then what is queued (at most
// drainMax more); it never panics on bad input.
func (s *hintServer) serve() {
	runtime.LockOSThread()
	boostThread()
	cpu0 := threadCPU() // the thread may have run other goroutines before
	defer func() { s.cpu.Store(threadCPU() - cpu0) }()
	const oobLen = 256 // SCM_CREDENTIALS, SCM_TIMESTAMPNS, up to 16 SCM_RIGHTS fds
	bufs := make([]byte, hintBatch*(hints.MaxDatagram+1))
	oobs := make([]byte, hintBatch*oobLen)
	var iovs [hintBatch]unix.Iovec
	var hdrs [hintBatch]mmsghdr
	for i := range hdrs {
		iovs[i].Base = &bufs[i*(hints.MaxDatagram+1)]
		iovs[i].SetLen(hints.MaxDatagram + 1)
		hdrs[i].hdr.Iov = &iovs[i]
		hdrs[i].hdr.Iovlen = 1
		hdrs[i].hdr.Control = &oobs[i*oobLen]
	}
	var msgs [hintBatch]hints.Message // one per slot: a row's children stay valid until delivered
	rows := make([]formats.Hint, 0, hintBatch)
	var h formats.Hint
	var fds [16]int32
	offset, offsetAt := clockOffset(), monoNow()
	// last is the previous hint's timestamp. The socket queue is FIFO, so
	// arrival times never go backwards; a converted one that does is the
	// offset estimate's error (microseconds where reading the clocks is
	// slow, as under emulation) and is raised to its predecessor's.
	var last uint64
	// After stop, left counts down the datagrams still taken without
	// waiting (-1 before stop).
	left := -1
	for {
		for i := range hdrs {
			hdrs[i].hdr.SetControllen(oobLen)
			hdrs[i].hdr.Flags = 0
			hdrs[i].n = 0
		}
		flags := unix.MSG_CMSG_CLOEXEC | unix.MSG_WAITFORONE
		if left >= 0 {
			flags |= unix.MSG_DONTWAIT
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&hdrs[0])), hintBatch,
			uintptr(flags), 0, 0)
		if errno != 0 {
			if errno == unix.EAGAIN || errno == unix.EINTR {
				if left >= 0 && errno == unix.EAGAIN {
					return // stopped, and the queue is empty
				}
				if left < 0 && s.quit.Load() {
					left = drainMax
				}
				continue
			}
			return // socket closed
		}
		mono := monoNow()
		if mono-offsetAt > uint64(time.Second) {
			offset, offsetAt = clockOffset(), mono
		}
		rows = rows[:0]
		for i := 0; i < int(n); i++ {
			mh := &hdrs[i].hdr
			oob := oobs[i*oobLen : i*oobLen+int(mh.Controllen)]
			buf := bufs[i*(hints.MaxDatagram+1) : (i+1)*(hints.MaxDatagram+1)]
			cred, nfds, rt := parseControl(oob, &fds)
			ts := mono
			if rt > offset && uint64(rt-offset) <= mono {
				ts = uint64(rt - offset)
			}
			ts = max(ts, last)
			last = ts
			rej := s.handle(buf, int(hdrs[i].n), mh.Flags, cred, fds[:nfds], ts, &msgs[i], &h)
			for _, fd := range fds[:nfds] {
				unix.Close(int(fd))
			}
			switch {
			case rej >= 0:
				s.rej[rej].Add(1)
			case rej == handledHint:
				rows = append(rows, h)
			}
		}
		if len(rows) > 0 && s.src.deliverHints(rows) {
			s.accepted.Add(uint64(len(rows)))
		}
		// A client that keeps sending never lets the receive time out:
		// stop is checked between batches too, and the drain is bounded.
		switch {
		case left >= 0:
			if left -= int(n); left <= 0 {
				return
			}
		case s.quit.Load():
			left = drainMax
		}
	}
}

// parseControl extracts the sender's credentials and passed descriptors
// (up to len(fds); extra ones are closed) from control messages.
func parseControl(oob []byte, fds *[16]int32) (cred *unix.Ucred, nfds int, realtimeNS int64) {
	for off := 0; off+unix.SizeofCmsghdr <= len(oob); {
		ch := (*unix.Cmsghdr)(unsafe.Pointer(&oob[off]))
		l := int(ch.Len)
		if l < unix.SizeofCmsghdr || off+l > len(oob) {
			break
		}
		data := oob[off+align(unix.SizeofCmsghdr) : off+l]
		if ch.Level == unix.SOL_SOCKET {
			switch ch.Type {
			case unix.SCM_CREDENTIALS:
				if len(data) >= unix.SizeofUcred {
					cred = (*unix.Ucred)(unsafe.Pointer(&data[0]))
				}
			case unix.SCM_TIMESTAMPNS:
				if len(data) >= int(unsafe.Sizeof(unix.Timespec{})) {
					realtimeNS = (*unix.Timespec)(unsafe.Pointer(&data[0])).Nano()
				}
			case unix.SCM_RIGHTS:
				for i := 0; i+4 <= len(data); i += 4 {
					fd := *(*int32)(unsafe.Pointer(&data[i]))
					if nfds < len(fds) {
						fds[nfds] = fd
						nfds++
					} else {
						unix.Close(int(fd))
					}
				}
			}
		}
		off += align(l)
	}
	return cred, nfds, realtimeNS
}

// handle checks and decodes one datagram into h; it returns a rej* reason,
// handledHint, or handledReport for a drop report (counted here).
func (s *hintServer) handle(buf []byte, n int, flags int32, cred *unix.Ucred, fds []int32, ts uint64, msg *hints.Message, h *formats.Hint) int {
	if cred == nil {
		return rejNoCreds
	}
	if !s.allowed[cred.Uid] {
		return rejForeign
	}
	if n > hints.MaxDatagram || flags&unix.MSG_TRUNC != 0 {
		return rejOversized
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return rejBadFile
	}
	if err := hints.Decode(buf[:n], msg); err != nil {
		switch {
		case errors.Is(err, hints.ErrTruncated):
			return rejTruncated
		case errors.Is(err, hints.ErrTooLarge):
			return rejOversized
		}
		return rejMalformed
	}
	if msg.Kind == hints.KindDropReport {
		if len(fds) != 0 {
			return rejBadFile
		}
		addSaturating(&s.dropFull, msg.QueueFull)
		addSaturating(&s.dropNone, msg.NoServer)
		return handledReport
	}
	var fe *fileEntry
	if msg.Flags&hints.FlagFD != 0 {
		if len(fds) != 1 {
			return rejBadFile
		}
		fd := int(fds[0])
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_PATH != 0 || fl&unix.O_ACCMODE == unix.O_WRONLY {
			return rejUnreadable
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return rejBadFile
		}
		key := statKey(&st)
		if fe = s.src.files.get(key); fe == nil {
			p, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			if !strings.HasPrefix(p, "/") {
				p = ""
			}
			fe = s.src.files.add(key, 0, strings.TrimSuffix(p, " (deleted)"))
		}
	} else {
		if len(fds) != 0 {
			return rejBadFile
		}
		var rej int
		fe, rej = s.checkPath(cred, msg.Path)
		if rej >= 0 {
			return rej
		}
	}
	*h = formats.Hint{TS: ts, PID: uint32(cred.Pid), Kind: formats.HintKind(msg.Kind), FileID: fe.id}
	switch msg.Kind {
	case hints.KindTreeChildEnter:
		h.ParentPage, h.Position, h.Children = msg.ParentPage, msg.Position, msg.Children
	case hints.KindTensorLayout:
		// A view of the receive buffer: valid until the batch is delivered.
		if len(msg.Name) > 0 {
			h.Name = unsafe.String(&msg.Name[0], len(msg.Name))
		}
		h.OffsetBytes, h.LengthBytes = msg.Offset, msg.Length
	case hints.KindLayerStart:
		h.Position = msg.Layer
	}
	return handledHint
}

// addSaturating adds v to c, stopping at the largest uint64: counts a
// sender reports are its claim, and must not wrap the total around. Only
// the serve goroutine adds.
func addSaturating(c *atomic.Uint64, v uint64) {
	old := c.Load()
	if old+v < old {
		c.Store(^uint64(0))
		return
	}
	c.Store(old + v)
}

func (s *hintServer) drops() HintDrops {
	return HintDrops{QueueFull: s.dropFull.Load(), NoServer: s.dropNone.Load()}
}

// checkPath resolves a hint's path for the sender, with a short-lived cache.
func (s *hintServer) checkPath(cred *unix.Ucred, path []byte) (*fileEntry, int) {
	ck := credKey{pid: uint32(cred.Pid), uid: cred.Uid, gid: cred.Gid}
	byPath := s.paths[ck]
	if byPath == nil {
		byPath = make(map[string]pathCheck)
		s.paths[ck] = byPath
	}
	if c, ok := byPath[string(path)]; ok && time.Since(c.at) < pathCheckTTL {
		return c.entry, c.rej
	}
	p := string(path)
	c := pathCheck{rej: -1, at: time.Now()}
	var st unix.Stat_t
	switch {
	case !strings.HasPrefix(p, "/"):
		c.rej = rejBadFile // relative paths are ambiguous for a daemon
	case unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG:
		c.rej = rejBadFile
	case !s.mayRead(cred, p, &st):
		c.rej = rejUnreadable
	default:
		key := statKey(&st)
		if c.entry = s.src.files.get(key); c.entry == nil {
			c.entry = s.src.files.add(key, 0, p)
		}
	}
	if _, ok := byPath[p]; !ok {
		if s.npaths >= maxPathChecks {
			clear(s.paths)
			s.npaths = 0
			byPath = make(map[string]pathCheck)
			s.paths[ck] = byPath
		}
		s.npaths++
	}
	byPath[p] = c
	return c.entry, c.rej
}

// mayRead reports whether the sender may read path: the kernel's own check
// as the sender (accessChecker: directory search permission, ACLs), or,
// where that is unavailable, the file's mode bits. Root reads everything.
func (s *hintServer) mayRead(cred *unix.Ucred, path string, st *unix.Stat_t) bool {
	if cred.Uid == 0 {
		return true
	}
	groups := s.senderGroups(uint32(cred.Pid))
	if s.access != nil {
		if ok, err := s.access.check(cred.Uid, cred.Gid, groups, path); err == nil {
			return ok
		}
	}
	return modeAllows(cred, groups, st)
}

// senderGroups returns the supplementary groups of pid, cached as long as
// path checks (pids are reused).
func (s *hintServer) senderGroups(pid uint32) []uint32 {
	pg, ok := s.groups[pid]
	if !ok || time.Since(pg.at) >= pathCheckTTL {
		if len(s.groups) > 4096 {
			clear(s.groups)
		}
		pg = procGroupsAt{groups: procGroups(pid), at: time.Now()}
		s.groups[pid] = pg
	}
	return pg.groups
}

// modeAllows applies the file's permission bits to the sender's uid, gid
// and supplementary groups.
func modeAllows(cred *unix.Ucred, groups []uint32, st *unix.Stat_t) bool {
	if st.Uid == cred.Uid {
		return st.Mode&unix.S_IRUSR != 0
	}
	inGroup := st.Gid == cred.Gid
	for _, g := range groups {
		inGroup = inGroup || g == st.Gid
	}
	if inGroup {
		return st.Mode&unix.S_IRGRP != 0
	}
	return st.Mode&unix.S_IROTH != 0
}

// procGroups reads the supplementary groups of pid.
func procGroups(pid uint32) []uint32 {
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Groups:"); ok {
			var gs []uint32
			for _, g := range strings.Fields(rest) {
				if v, err := strconv.ParseUint(g, 10, 32); err == nil {
					gs = append(gs, uint32(v))
				}
			}
			return gs
		}
	}
	return nil
}
