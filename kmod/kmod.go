// Package kmod is the Go side of the PredictIO kernel backend: it talks to
// the predictio kernel module (/dev/predictio, sources in kmod/module) and
// implements policies.Backend on top of it.
//
// A Backend registers files (each gets a kernel slot), writes prefetch
// ranges into a request ring shared with the module, and issues one NOTIFY
// ioctl per Submit. The module validates the entries, clips them at end of
// file, queues bounded work items, skips pages already cached or in flight
// and reads the rest asynchronously through the kernel's readahead
// machinery. Submit never waits for I/O: when a bound is hit, the module
// drops and counts.
//
// Needs the predictio module loaded (Linux 6.1 or newer) and read-write
// access to /dev/predictio (root by default). See docs/kmod.md.
package kmod

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/policies"
)

// DevicePath is where the module's misc device appears.
const DevicePath = "/dev/predictio"

// ErrNotLoaded means the predictio kernel module is not loaded.
var ErrNotLoaded = errors.New("predictio kernel module not loaded: build it with `make -C kmod/module` and load it with `insmod kmod/module/predictio.ko` (needs Linux 6.1+ with module support; see docs/kmod.md)")

// ErrUnknownFile means a request named a file id that was not registered.
var ErrUnknownFile = errors.New("file not registered")

// Option configures Open.
type Option func(*options)

type options struct {
	dev string
	cfg Config
}

// WithDevice opens path instead of /dev/predictio.
func WithDevice(path string) Option { return func(o *options) { o.dev = path } }

// WithQueueCapacity bounds the module's work-item FIFO.
func WithQueueCapacity(n uint32) Option { return func(o *options) { o.cfg.QueueCapacity = n } }

// WithInFlightLimit bounds the pages submitted and not yet read.
func WithInFlightLimit(n uint32) Option { return func(o *options) { o.cfg.InFlightLimit = n } }

// WithWorkers sets the number of kernel workers draining the FIFO.
func WithWorkers(n uint32) Option { return func(o *options) { o.cfg.Workers = n } }

// WithItemPages sets the maximum pages per work item.
func WithItemPages(n uint32) Option { return func(o *options) { o.cfg.ItemPages = n } }

// WithRingEntries sets the request ring size (a power of two).
func WithRingEntries(n uint32) Option { return func(o *options) { o.cfg.RingEntries = n } }

// Backend is a policies.Backend executed by the predictio kernel module.
// Its methods are safe for concurrent use; Submit calls are serialized
// because the ring has a single producer.
type Backend struct {
	mu    sync.Mutex
	dev   *os.File
	fd    int
	ring  []byte
	hdr   *ringHdr
	ents  []Entry
	mask  uint32
	head  uint32
	cfg   Config
	slots map[uint32]uint32 // request file id -> kernel slot

	requests      uint64
	localRejected uint64
	last          policies.BackendStats
}

var _ policies.Backend = (*Backend)(nil)

// Open opens the module's device, applies the bounds and maps the request
// ring. It fails with ErrNotLoaded when /dev/predictio is absent.
func Open(opts ...Option) (*Backend, error) {
	o := options{dev: DevicePath}
	for _, opt := range opts {
		opt(&o)
	}
	dev, err := os.OpenFile(o.dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open %s: %w", o.dev, ErrNotLoaded)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("open %s: %w: the device is root-only (mode 0600); run as root or grant read-write access to it", o.dev, err)
		}
		return nil, fmt.Errorf("open %s: %w", o.dev, err)
	}
	b := &Backend{dev: dev, fd: int(dev.Fd()), slots: make(map[uint32]uint32)}
	cfg := o.cfg
	if err := b.ioctl(iocConfig, unsafe.Pointer(&cfg)); err != nil {
		dev.Close()
		return nil, fmt.Errorf("configure %s: %w", o.dev, err)
	}
	b.cfg = cfg
	size := ringSize(cfg.RingEntries, os.Getpagesize())
	ring, err := unix.Mmap(b.fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("map request ring of %s: %w", o.dev, err)
	}
	b.ring = ring
	b.hdr = (*ringHdr)(unsafe.Pointer(&ring[0]))
	if b.hdr.Entries != cfg.RingEntries || b.hdr.EntrySize != uint32(unsafe.Sizeof(Entry{})) || b.hdr.ABIVersion != ABIVersion {
		b.Close()
		return nil, fmt.Errorf("map request ring of %s: module ABI %d with %d entries of %d bytes, want ABI %d with %d of %d: rebuild the module from this tree",
			o.dev, b.hdr.ABIVersion, b.hdr.Entries, b.hdr.EntrySize, ABIVersion, cfg.RingEntries, unsafe.Sizeof(Entry{}))
	}
	b.ents = unsafe.Slice((*Entry)(unsafe.Pointer(&ring[ringEntriesOff])), cfg.RingEntries)
	b.mask = cfg.RingEntries - 1
	b.head = atomic.LoadUint32(&b.hdr.Head)
	return b, nil
}

// Config returns the effective bounds.
func (b *Backend) Config() Config { return b.cfg }

// SetConfig changes the bounds; zero fields keep their value. The ring size
// cannot change after Open.
func (b *Backend) SetConfig(c Config) (Config, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return c, fmt.Errorf("configure predictio: %w", ErrClosed)
	}
	if err := b.ioctl(iocConfig, unsafe.Pointer(&c)); err != nil {
		return c, fmt.Errorf("configure predictio: %w", err)
	}
	b.cfg = c
	return c, nil
}

// Register gives f a kernel slot; requests with File == id then prefetch
// from it. The module keeps its own reference to the open file.
func (b *Backend) Register(id uint32, f *os.File) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return fmt.Errorf("register %s: %w", f.Name(), ErrClosed)
	}
	if _, ok := b.slots[id]; ok {
		return fmt.Errorf("register %s: file id %d already registered", f.Name(), id)
	}
	r := register{FD: int32(f.Fd())}
	if err := b.ioctl(iocRegisterFD, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("register %s: %w", f.Name(), err)
	}
	b.slots[id] = r.Slot
	return nil
}

// Slot returns the kernel slot of a registered file id.
func (b *Backend) Slot(id uint32) (uint32, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.slots[id]
	return s, ok
}

// Unregister drops the module's reference to the file registered as id.
// Work already queued for it still runs.
func (b *Backend) Unregister(id uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return fmt.Errorf("unregister file id %d: %w", id, ErrClosed)
	}
	s, ok := b.slots[id]
	if !ok {
		return fmt.Errorf("unregister file id %d: %w", id, ErrUnknownFile)
	}
	if err := b.ioctl(iocUnregister, unsafe.Pointer(&s)); err != nil {
		return fmt.Errorf("unregister file id %d: %w", id, err)
	}
	delete(b.slots, id)
	return nil
}

// Submit writes one ring entry per range and notifies the module once. It
// never waits for I/O; entries the module cannot queue are dropped and
// counted there.
func (b *Backend) Submit(req *policies.Request) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return fmt.Errorf("submit to kmod: %w", ErrClosed)
	}
	b.requests++
	slot, ok := b.slots[req.File]
	if !ok {
		b.localRejected++
		return fmt.Errorf("submit to kmod: file id %d: %w", req.File, ErrUnknownFile)
	}
	for _, r := range req.Ranges {
		if err := b.put(Entry{Slot: slot, Count: r.N, First: r.First}); err != nil {
			return err
		}
	}
	return b.notify()
}

// SubmitEntries writes raw entries (any slot, any range) and notifies once.
// It is for tests and tools that exercise the module's validation.
func (b *Backend) SubmitEntries(es []Entry) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return fmt.Errorf("submit to kmod: %w", ErrClosed)
	}
	for _, e := range es {
		if err := b.put(e); err != nil {
			return err
		}
	}
	return b.notify()
}

// put appends one entry, draining the ring through NOTIFY when it is full.
func (b *Backend) put(e Entry) error {
	if b.head-atomic.LoadUint32(&b.hdr.Tail) >= uint32(len(b.ents)) {
		if err := b.notify(); err != nil {
			return err
		}
	}
	b.ents[b.head&b.mask] = e
	b.head++
	return nil
}

// notify publishes head (store-release; the module load-acquires it) and
// has the module consume the ring.
func (b *Backend) notify() error {
	atomic.StoreUint32(&b.hdr.Head, b.head)
	if err := b.ioctl(iocNotify, nil); err != nil {
		return fmt.Errorf("notify predictio: %w", err)
	}
	return nil
}

// Notify has the module consume the ring now.
func (b *Backend) Notify() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return fmt.Errorf("notify predictio: %w", ErrClosed)
	}
	return b.notify()
}

// ErrClosed means the backend was closed.
var ErrClosed = errors.New("kmod backend closed")

// Counters reads the module's counters for this backend.
func (b *Backend) Counters() (Counters, error) {
	var c Counters
	// Hold mu across the ioctl: a concurrent Close could otherwise close
	// b.fd and let the number be reused by another file.
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return c, fmt.Errorf("read predictio stats: %w", ErrClosed)
	}
	if err := b.ioctl(iocStats, unsafe.Pointer(&c)); err != nil {
		return c, fmt.Errorf("read predictio stats: %w", err)
	}
	return c, nil
}

// Stats maps the module's counters onto policies.BackendStats. If the
// counters cannot be read it returns the last values it read.
func (b *Backend) Stats() policies.BackendStats {
	c, err := b.Counters()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		return b.last
	}
	b.last = policies.BackendStats{
		Requests:       b.requests,
		PagesRequested: c.PagesRequested,
		PagesSubmitted: c.PagesSubmitted,
		PagesCached:    c.PagesCached,
		PagesPastEOF:   c.PagesPastEOF,
		Dropped:        c.DroppedQueueFull,
		Rejected:       c.Rejected() + b.localRejected,
		Failures:       c.Failures,
		InFlightMax:    c.InFlightMax,
		Throttled:      c.Throttles,
	}
	return b.last
}

// Close unmaps the ring and closes the device. The module cancels queued
// work and drops its file references; reads already submitted complete.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var err error
	if b.ring != nil {
		err = unix.Munmap(b.ring)
		b.ring, b.hdr, b.ents = nil, nil, nil
	}
	if b.dev != nil {
		if cerr := b.dev.Close(); err == nil {
			err = cerr
		}
		b.dev = nil
	}
	return err
}

// setHead stores a raw head index, bypassing the producer bookkeeping. Only
// tests use it, to check that the module rejects a head out of range.
func (b *Backend) setHead(h uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.head = h
	atomic.StoreUint32(&b.hdr.Head, h)
}

func (b *Backend) ioctl(req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(b.fd), req, uintptr(arg))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}
