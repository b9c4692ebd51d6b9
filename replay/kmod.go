package replay

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/predictio/predictio/kmod"
	"github.com/predictio/predictio/policies"
)

// kmodBackend hands prefetch requests to the predictio kernel module
// (package kmod, /dev/predictio), which validates them, skips cached pages
// and reads the rest into the page cache with bounded kernel workers.
// Demand accesses go through the page cache, as with the kernel backend.
// Needs the module loaded (docs/kmod.md).
//
// The module decides per page whether to read; for Prefetched/Used the
// backend marks the requested pages that mincore showed not resident at
// Submit, so Prefetched can differ slightly from the module's
// PagesSubmitted (a page read by a demand access in between).
type kmodBackend struct {
	pageCacheDemand
	be    *kmod.Backend
	mu    sync.Mutex
	vec   []byte
	final *policies.BackendStats
}

// kmodAvailable checks up front, before any run, that the module's device
// exists.
func kmodAvailable() error {
	if _, err := os.Stat(kmod.DevicePath); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replay: kmod backend: open %s: %w", kmod.DevicePath, kmod.ErrNotLoaded)
	}
	return nil
}

func newKmodBackend(files []*openFile, ps int, inflight int) (*kmodBackend, error) {
	var opts []kmod.Option
	if inflight > 0 {
		opts = append(opts, kmod.WithInFlightLimit(uint32(min(inflight, math.MaxUint32))))
	}
	be, err := kmod.Open(opts...)
	if err != nil {
		return nil, fmt.Errorf("replay: kmod backend: %w", err)
	}
	for i, f := range files {
		if f == nil {
			continue
		}
		if err := be.Register(uint32(i), f.file); err != nil {
			be.Close()
			return nil, fmt.Errorf("replay: kmod backend: %w", err)
		}
	}
	return &kmodBackend{pageCacheDemand: pageCacheDemand{files: files, ps: ps, track: newTracker(files, ps)}, be: be}, nil
}

func (b *kmodBackend) Submit(req *policies.Request) error {
	if int(req.File) < len(b.files) && b.files[req.File] != nil {
		b.markMissing(req)
	}
	err := b.be.Submit(req)
	if errors.Is(err, kmod.ErrUnknownFile) {
		return nil // counted as rejected, like the kernel backend does
	}
	return err
}

// markMissing records as prefetched the requested pages, clipped at end of
// file, that are not resident now.
func (b *kmodBackend) markMissing(req *policies.Request) {
	f := b.files[req.File]
	ps := uint64(b.ps)
	eof := f.pages(b.ps)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range req.Ranges {
		n, ok := clipEOF(r, eof)
		if !ok {
			continue
		}
		first := r.First
		if f.mem == nil {
			b.track.prefetched(req.File, first, n)
			continue
		}
		if uint64(cap(b.vec)) < n {
			b.vec = make([]byte, n)
		}
		vec := b.vec[:n]
		region := f.mem[first*ps:]
		if uint64(len(region)) > n*ps {
			region = region[:n*ps]
		}
		if err := mincore(region, vec); err != nil {
			b.track.prefetched(req.File, first, n)
			continue
		}
		for i := uint64(0); i < n; i++ {
			if vec[i]&1 == 0 {
				b.track.prefetched(req.File, first+i, 1)
			}
		}
	}
}

func (b *kmodBackend) Stats() policies.BackendStats {
	if b.final != nil {
		return *b.final
	}
	return b.be.Stats()
}

// finish waits (up to a minute) for the module to finish the queued work,
// reads the counters and closes the device.
func (b *kmodBackend) finish() targetStats {
	var warn []string
	var c kmod.Counters
	var err error
	for deadline := time.Now().Add(time.Minute); ; {
		c, err = b.be.Counters()
		if err != nil {
			warn = append(warn, err.Error())
			break
		}
		if c.QueueLen == 0 && c.ItemsDone == c.ItemsQueued && c.InFlightPages == 0 {
			break
		}
		if time.Now().After(deadline) {
			warn = append(warn, fmt.Sprintf("kmod: module still busy after a minute: %d items queued, %d pages in flight", c.QueueLen, c.InFlightPages))
			break
		}
		time.Sleep(time.Millisecond)
	}
	st := b.be.Stats()
	b.final = &st
	b.be.Close()
	if c.Failures > 0 {
		warn = append(warn, fmt.Sprintf("kmod: %d pages failed to read", c.Failures))
	}
	pre, used := b.track.counts()
	return targetStats{Prefetched: pre, Used: used, Wasted: pre - used, DroppedPages: c.PagesDropped,
		Via: "predictio kernel module (/dev/predictio)", Warnings: warn}
}
