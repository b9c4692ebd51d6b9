package hints

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File names the file a hint is about: by path, or by an open descriptor
// that travels with the hint (SCM_RIGHTS), which also proves the sender can
// read it.
type File struct {
	path string
	fd   int
}

// Path names a file by path. Relative paths are resolved by the recorder
// against its own working directory, so prefer absolute paths.
func Path(p string) File { return File{path: p, fd: -1} }

// FD names a file by an open descriptor, sent with the hint.
func FD(f *os.File) File { return File{fd: int(f.Fd())} }

// DefaultReconnectInterval is the least time between two reconnect attempts
// of a Client whose recorder went away, when Dialer.ReconnectInterval is 0.
const DefaultReconnectInterval = 100 * time.Millisecond

// reportInterval is the least time between two drop reports while drops go
// on, so that reports take a negligible share of a saturated queue.
const reportInterval = 10 * time.Millisecond

// ErrClosed is returned by a Client used after Close.
var ErrClosed = errors.New("hints client closed")

// Dialer holds options for connecting to a hint socket. The zero value is
// Dial's behaviour.
type Dialer struct {
	// Lazy makes Dial succeed when no recorder listens at the path yet:
	// hints are then dropped (and counted as NoServer) until one does, and
	// the client connects by itself within ReconnectInterval of its first
	// hint after the recorder started.
	Lazy bool
	// ReconnectInterval is the least time between two reconnect attempts
	// after the recorder went away or its queue stayed full (a recorder
	// restarted on the same path, a daemon restarted). 0 means
	// DefaultReconnectInterval.
	ReconnectInterval time.Duration
}

// Stats counts what a Client did with the hints it was given.
type Stats struct {
	Sent       uint64 // hints the kernel queued on the recorder's socket
	QueueFull  uint64 // dropped: the recorder's queue was full (it is slow, stopped or stuck)
	NoServer   uint64 // dropped: nothing listened at the socket (recorder not started, exited or restarting)
	Reported   uint64 // dropped hints the recorder has been told about (drop_report datagrams queued)
	Reconnects uint64 // reconnect attempts that connected
}

// Dropped returns QueueFull + NoServer.
func (s Stats) Dropped() uint64 { return s.QueueFull + s.NoServer }

// Client sends hints to a recorder. Its methods are safe for concurrent use
// and never block on the recorder: a hint that cannot be queued at once is
// dropped, counted, and reported to the recorder with a later datagram. A
// hint method returns an error only for a hint the wire format cannot carry
// or a closed Client, never because the recorder is slow or absent.
type Client struct {
	mu       sync.Mutex
	fd       int
	path     string
	sa       unix.SockaddrUnix
	interval time.Duration
	buf      []byte // the datagram being sent
	rep      []byte // drop_report datagram
	oob      []byte // one SCM_RIGHTS control message with room for one fd

	// Guarded by mu.
	lastTry     time.Time // last reconnect attempt
	lastReport  time.Time // last drop report queued
	repFull     uint64    // QueueFull already reported
	repNoServer uint64    // NoServer already reported
	tries       int       // reconnect attempts (tests check the rate limit)

	sent, queueFull, noServer, reported, reconnects atomic.Uint64
}

// Dial connects to the recorder's hint socket at path. It fails when no
// recorder listens there; Dialer{Lazy: true}.Dial does not.
func Dial(path string) (*Client, error) { return Dialer{}.Dial(path) }

// Dial connects to the hint socket at path with d's options.
func (d Dialer) Dial(path string) (*Client, error) {
	if d.ReconnectInterval < 0 {
		return nil, fmt.Errorf("dial hints %s: negative reconnect interval %v", path, d.ReconnectInterval)
	}
	if len(path) == 0 || len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("dial hints %q: socket path length %d not in 1..%d: %w",
			path, len(path), len(unix.RawSockaddrUnix{}.Path)-1, unix.ENAMETOOLONG)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dial hints %s: socket: %w", path, err)
	}
	c := &Client{
		fd: fd, path: path, sa: unix.SockaddrUnix{Name: path}, interval: d.ReconnectInterval,
		buf: make([]byte, 0, 512), rep: AppendDropReport(nil, 0, 0),
		oob: make([]byte, unix.CmsgSpace(4)),
	}
	if c.interval == 0 {
		c.interval = DefaultReconnectInterval
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c.oob[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_RIGHTS
	h.SetLen(unix.CmsgLen(4))
	c.lastTry = time.Now()
	if err := unix.Connect(fd, &c.sa); err != nil && !d.Lazy {
		unix.Close(fd)
		return nil, fmt.Errorf("dial hints %s: %w (is predictio record --hints unix:%s running?)", path, err, path)
	}
	return c, nil
}

// Dropped returns how many hints this Client dropped because the recorder
// could not take them (Stats().Dropped()).
func (c *Client) Dropped() uint64 { return c.queueFull.Load() + c.noServer.Load() }

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Sent: c.sent.Load(), QueueFull: c.queueFull.Load(), NoServer: c.noServer.Load(),
		Reported: c.reported.Load(), Reconnects: c.reconnects.Load(),
	}
}

// dropClass sorts a send error: a full queue, no server, or neither (an
// error for the caller).
type dropClass int

const (
	notDropped dropClass = iota
	dropQueueFull
	dropNoServer
)

func classify(err error) dropClass {
	switch err {
	case unix.EAGAIN, unix.ENOBUFS, unix.ENOMEM:
		return dropQueueFull
	case unix.ECONNREFUSED, unix.ENOTCONN, unix.ECONNRESET, unix.EPIPE, unix.EDESTADDRREQ, unix.ENOENT:
		return dropNoServer
	}
	return notDropped
}

// sendmsg sends b (with oob) without blocking; it retries EINTR only.
func (c *Client) sendmsg(b, oob []byte) error {
	for {
		_, err := unix.SendmsgN(c.fd, b, oob, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if err != unix.EINTR {
			return err
		}
	}
}

// send sends c.buf for file f; the caller holds c.mu.
func (c *Client) send(f File) error {
	if c.fd < 0 {
		return ErrClosed
	}
	var oob []byte
	if f.path == "" {
		if f.fd < 0 {
			return fmt.Errorf("send hint: no file given: %w", ErrMalformed)
		}
		*(*int32)(unsafe.Pointer(&c.oob[unix.CmsgLen(0)])) = int32(f.fd)
		oob = c.oob
	}
	err := c.sendmsg(c.buf, oob)
	if err != nil && classify(err) != notDropped && c.reconnect() {
		err = c.sendmsg(c.buf, oob)
	}
	switch classify(err) {
	case notDropped:
		if err != nil {
			return fmt.Errorf("send hint: %w", err)
		}
		c.sent.Add(1)
		if c.unreported() {
			_ = c.report(false)
		}
	case dropQueueFull:
		c.queueFull.Add(1)
	case dropNoServer:
		c.noServer.Add(1)
	}
	return nil
}

// reconnect connects the socket to the path again when the last attempt
// is ReconnectInterval old, and reports whether it connected. connect(2) of
// a Unix datagram socket does not wait for the peer, so this never blocks;
// a recorder that restarted on the same path is found this way.
func (c *Client) reconnect() bool {
	now := time.Now()
	if now.Sub(c.lastTry) < c.interval {
		return false
	}
	c.lastTry = now
	c.tries++
	if unix.Connect(c.fd, &c.sa) != nil {
		return false
	}
	c.reconnects.Add(1)
	return true
}

// report queues a drop_report of the drops not reported yet, at most once
// per reportInterval unless force. A report that cannot be queued is not a
// dropped hint; its counts go with the next one. The caller holds c.mu.
func (c *Client) report(force bool) error {
	now := time.Now()
	if !force && now.Sub(c.lastReport) < reportInterval {
		return nil
	}
	full, none := c.queueFull.Load(), c.noServer.Load()
	c.rep = AppendDropReport(c.rep[:0], full-c.repFull, none-c.repNoServer)
	if err := c.sendmsg(c.rep, nil); err != nil {
		return err
	}
	c.lastReport = now
	c.reported.Add(full - c.repFull + none - c.repNoServer)
	c.repFull, c.repNoServer = full, none
	return nil
}

func (c *Client) unreported() bool {
	return c.repFull != c.queueFull.Load() || c.repNoServer != c.noServer.Load()
}

// Flush tells the recorder now about the drops it has not been told about,
// without waiting. It returns nil when there are none or the report was
// queued, and otherwise the send error (unix.EAGAIN while the recorder's
// queue is full, unix.ECONNREFUSED or unix.ENOTCONN while none listens);
// the counts then go with the next report. A program that wants its drops
// known before it exits retries Flush for as long as it cares to.
func (c *Client) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return ErrClosed
	}
	if !c.unreported() {
		return nil
	}
	err := c.report(true)
	if err != nil && classify(err) != notDropped && c.reconnect() {
		err = c.report(true)
	}
	if err != nil {
		return fmt.Errorf("report dropped hints: %w", err)
	}
	return nil
}

// TreeChildEnter says a tree traversal is entering child number position
// (0 = first) of the node stored at page parentPage of file. children are
// the upcoming child pages: the parent's children after position, in the
// order the traversal will enter them, without the child being entered
// (kids[position+1:] of the parent's child list).
func (c *Client) TreeChildEnter(file File, parentPage uint64, position uint32, children []uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.buf, err = AppendTreeChildEnter(c.buf[:0], file.path, parentPage, position, children); err != nil {
		return err
	}
	return c.send(file)
}

// TensorLayout says tensor name occupies length bytes at offset of file.
func (c *Client) TensorLayout(file File, name string, offset, length uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.buf, err = AppendTensorLayout(c.buf[:0], file.path, name, offset, length); err != nil {
		return err
	}
	return c.send(file)
}

// LayerStart says the program is starting layer number layer, whose weights
// are in file.
func (c *Client) LayerStart(file File, layer uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.buf, err = AppendLayerStart(c.buf[:0], file.path, layer); err != nil {
		return err
	}
	return c.send(file)
}

// Close reports the drops the recorder has not been told about (one
// attempt, as Flush: a recorder whose queue is full then never learns
// them) and closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil
	}
	if c.unreported() {
		_ = c.report(true)
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}
