package backend

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/predictio/predictio/kmod"
	"github.com/predictio/predictio/policies"
)

// Kmod hands prefetch requests to the predictio kernel module (package
// kmod, /dev/predictio), which validates them, skips cached pages and
// reads the rest into the page cache with bounded kernel workers. Its
// service goroutine opens and checks each file as for Kernel, registers it
// with the module on first use, and writes the ranges to the module's
// ring. Needs the module loaded (docs/kmod.md).
//
// Options.Issued gets the requested pages that mincore showed not
// resident when they were handed to the module: the module decides per
// page, so a page a demand read in between is reported issued too.
type Kmod struct {
	*queue
	be      *kmod.Backend
	issued  func(file uint32, first, n uint64)
	slots   map[*File]bool // registered with the module
	req     policies.Request
	vec     []byte
	final   *policies.BackendStats
	modDrop uint64
	warn    []string
}

// KmodAvailable checks that the module's device exists.
func KmodAvailable() error {
	if _, err := os.Stat(kmod.DevicePath); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kmod backend: open %s: %w", kmod.DevicePath, kmod.ErrNotLoaded)
	}
	return nil
}

// NewKmod opens the module and starts a kmod backend over reg;
// Options.InFlight becomes the module's in-flight limit.
func NewKmod(reg *Registry, o Options) (*Kmod, error) {
	var opts []kmod.Option
	if o.InFlight > 0 {
		opts = append(opts, kmod.WithInFlightLimit(uint32(min(o.InFlight, math.MaxUint32))))
	}
	be, err := kmod.Open(opts...)
	if err != nil {
		return nil, fmt.Errorf("kmod backend: %w", err)
	}
	b := &Kmod{queue: newQueue(reg, &o), be: be, issued: o.Issued, slots: map[*File]bool{}}
	b.req.Ranges = make([]policies.Range, 1)
	go b.service()
	return b, nil
}

func (b *Kmod) service() {
	defer close(b.done)
	for r := range b.ch {
		t0 := time.Now()
		b.handle(r)
		b.busyNS.Add(uint64(time.Since(t0)))
	}
}

// handle registers r's file with the module if needed and hands it the
// range.
func (b *Kmod) handle(r kreq) {
	_, n := b.open(r)
	if n == 0 {
		return
	}
	defer r.f.release()
	defer b.settle(n)
	if !b.slots[r.f] {
		if err := b.be.Register(r.f.ref.ID, r.f.osFile()); err != nil {
			b.refuse(n, err)
			return
		}
		b.slots[r.f] = true
	}
	b.markMissing(r.f, r.first, n)
	b.req.File = r.f.ref.ID
	b.req.Ranges[0] = policies.Range{First: r.first, N: uint32(n)}
	if err := b.be.Submit(&b.req); err != nil {
		b.fail(err)
	}
}

// markMissing reports to Issued the pages of [first, first+n) that are not
// resident now.
func (b *Kmod) markMissing(f *File, first, n uint64) {
	if b.issued == nil {
		return
	}
	if cap(b.vec) < int(n) {
		b.vec = make([]byte, n)
	}
	vec := b.vec[:n]
	if err := f.residentVec(first, vec, b.ps); err != nil {
		b.issued(f.ref.ID, first, n)
		return
	}
	for i := uint64(0); i < n; {
		if vec[i] != 0 {
			i++
			continue
		}
		j := i
		for j < n && vec[j] == 0 {
			j++
		}
		b.issued(f.ref.ID, first+i, j-i)
		i = j
	}
}

// Stats merges the backend's own counters with the module's.
func (b *Kmod) Stats() policies.BackendStats {
	var m policies.BackendStats
	if b.final != nil {
		m = *b.final
	} else {
		m = b.be.Stats()
	}
	q := b.counters.Stats()
	return policies.BackendStats{
		Requests:       q.Requests,
		PagesRequested: q.PagesRequested,
		PagesSubmitted: m.PagesSubmitted,
		PagesCached:    m.PagesCached,
		PagesPastEOF:   q.PagesPastEOF + m.PagesPastEOF,
		Dropped:        q.Dropped + m.Dropped,
		Rejected:       q.Rejected + m.Rejected,
		Failures:       q.Failures + m.Failures,
		InFlightMax:    m.InFlightMax,
		Throttled:      q.Throttled + m.Throttled,
	}
}

// Close drains the queue, waits (up to a minute) for the module to finish
// the queued work, reads its counters and closes the device.
func (b *Kmod) Close() (Report, error) {
	b.stop()
	var c kmod.Counters
	var err error
	for deadline := time.Now().Add(time.Minute); ; {
		c, err = b.be.Counters()
		if err != nil {
			b.warn = append(b.warn, err.Error())
			break
		}
		if c.QueueLen == 0 && c.ItemsDone == c.ItemsQueued && c.InFlightPages == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.warn = append(b.warn, fmt.Sprintf("kmod: module still busy after a minute: %d items queued, %d pages in flight", c.QueueLen, c.InFlightPages))
			break
		}
		time.Sleep(time.Millisecond)
	}
	st := b.be.Stats()
	b.final = &st
	b.modDrop = c.PagesDropped
	cerr := b.be.Close()
	if c.Failures > 0 {
		b.warn = append(b.warn, fmt.Sprintf("kmod: %d pages failed to read", c.Failures))
	}
	rep := b.report("predictio kernel module (/dev/predictio)")
	rep.Stats = b.Stats()
	rep.PagesDropped += b.modDrop
	rep.Warnings = append(rep.Warnings, b.warn...)
	return rep, cerr
}

// osFile returns the open file; valid while acquired.
func (f *File) osFile() *os.File {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.file
}
