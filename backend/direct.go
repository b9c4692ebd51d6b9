package backend

import (
	"fmt"
	"os"
	"time"

	"github.com/predictio/predictio/engine"
)

// Reservation is a Cache's answer to a prefetch of one page.
type Reservation uint8

const (
	// Reserved: a slot is claimed for the page; the backend reads it and
	// calls Fill.
	Reserved Reservation = iota
	// Present: the page is cached or being read already; it is skipped
	// and counted cached.
	Present
	// Full: no slot can be had now; the rest of the range is dropped.
	Full
)

// Cache is the user-space page cache the direct backend fills. Reserve
// and Fill are called from the backend's goroutine, concurrently with the
// cache's own users.
type Cache interface {
	// Reserve claims a slot for page of file id for a prefetch read.
	Reserve(file uint32, page uint64) (slot int32, r Reservation)
	// Fill completes a reserved slot with the page's bytes, valid only
	// during the call (short at end of file), or with the read's error.
	Fill(slot int32, data []byte, err error)
}

// DirectOptions configure NewDirect.
type DirectOptions struct {
	Options
	// QueueDepth bounds the O_DIRECT reads in flight; 0 means 64.
	QueueDepth int
	// SQPoll gives the backend's ring an SQPOLL thread.
	SQPoll bool
}

// Direct reads requested pages with O_DIRECT through the engine
// (io_uring READ_FIXED, fixed files) into a Cache, one page per read, so
// the kernel's page cache is never involved. Options.InFlight bounds the
// pages queued or being read. Every file is opened with O_DIRECT when the
// backend starts (the engine's files are fixed); requests naming files
// registered later are refused. Needs Linux 5.6 and a filesystem that
// honours O_DIRECT.
type Direct struct {
	*queue
	cache Cache
	eng   *engine.Engine
	ew    *engine.Worker
	emap  map[*File]int // engine file index
	info  string
}

// NewDirect opens every file of reg with O_DIRECT and starts a direct
// backend filling cache.
func NewDirect(reg *Registry, cache Cache, o DirectOptions) (*Direct, error) {
	if o.QueueDepth <= 0 {
		o.QueueDepth = 64
	}
	d := &Direct{queue: newQueue(reg, &o.Options), cache: cache, emap: map[*File]int{}}
	var files []*os.File
	for _, f := range reg.Files() {
		df, err := f.OpenDirect()
		if err != nil {
			return nil, fmt.Errorf("direct backend: %w", err)
		}
		d.emap[f] = len(files)
		files = append(files, df)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("direct backend: no files registered")
	}
	opts := []engine.Option{engine.WithWorkers(1), engine.WithQueueDepth(o.QueueDepth), engine.WithHandler(d.completed)}
	d.info = "engine: io_uring READ_FIXED, fixed files"
	if o.SQPoll {
		opts = append(opts, engine.WithSQPoll(100*time.Millisecond))
		d.info += ", SQPOLL"
	}
	eng, err := engine.New(files, opts...)
	if err != nil {
		return nil, fmt.Errorf("direct backend: %w", err)
	}
	d.eng, d.ew = eng, eng.Worker(0)
	go d.service()
	return d, nil
}

func (d *Direct) service() {
	defer close(d.done)
	for {
		var r kreq
		var ok bool
		if d.ew.InFlight() == 0 {
			r, ok = <-d.ch
		} else {
			select {
			case r, ok = <-d.ch:
			default:
				if _, err := d.ew.Harvest(1); err != nil {
					d.fail(err)
				}
				continue
			}
		}
		if !ok {
			if err := d.ew.Drain(); err != nil {
				d.fail(err)
			}
			return
		}
		d.read(r)
		if _, err := d.ew.Poll(); err != nil {
			d.fail(err)
		}
	}
}

// read reserves a cache slot for each page of r and reads it.
func (d *Direct) read(r kreq) {
	_, n := d.open(r)
	if n == 0 {
		return
	}
	defer r.f.release()
	idx, ok := d.emap[r.f]
	if !ok {
		d.settle(n)
		d.refuse(n, fmt.Errorf("prefetch %s: registered after the direct backend started", r.f.ref))
		return
	}
	id := r.f.ref.ID
	for p := r.first; p < r.first+n; p++ {
		slot, res := d.cache.Reserve(id, p)
		switch res {
		case Present:
			d.pagesCached.Add(1)
			d.settle(1)
			continue
		case Full:
			rest := r.first + n - p
			d.drop(rest, false)
			d.settle(rest)
			return
		}
		d.pagesSubmitted.Add(1)
		err := d.ew.Submit(engine.Request{Op: engine.OpRead, File: idx, Off: int64(p) * int64(d.ps), Len: d.ps, Token: uint64(slot)})
		if err != nil {
			d.fail(err)
			d.cache.Fill(slot, nil, err)
			d.settle(1)
		}
		d.noteInFlight(uint64(d.ew.InFlight()))
	}
}

// completed is the engine's handler.
func (d *Direct) completed(c *engine.Completion) {
	err := c.Err
	if err == nil && c.Res == 0 {
		err = fmt.Errorf("read O_DIRECT page at offset %d: unexpected end of file", c.Off)
	}
	if err != nil {
		d.fail(err)
		d.cache.Fill(int32(c.Token), nil, err)
	} else {
		d.cache.Fill(int32(c.Token), c.Data[:c.Res], nil)
	}
	d.settle(1)
}

// Close drains the queue and the reads in flight and closes the engine.
func (d *Direct) Close() (Report, error) {
	d.stop()
	err := d.eng.Close()
	rep := d.report(d.info)
	if !d.eng.Mlocked() && d.eng.MlockErr() != nil {
		rep.Warnings = append(rep.Warnings, d.eng.MlockErr().Error())
	}
	return rep, err
}
