// Package backend executes prefetch requests: the kernel backend (io_uring
// FADVISE(WILLNEED) into the page cache), kmod (the predictio kernel
// module), direct (O_DIRECT reads into a caller's user-space cache) and
// none (counts and discards). replay, the live runtime and the daemon share
// them.
//
// Requests name files by the caller's file id; a Registry maps each id to a
// (dev, ino, path). A backend opens a file by its path when a request first
// names it, refuses it unless it is the registered regular file (same
// device and inode, no symlink in the last component), and re-checks the
// path with lstat before each prefetch, so a path whose file changed is
// never read. Each backend owns its counters: Stats while it runs, a Report
// from Close.
//
// Submit never blocks on I/O: the page-cache backends count, bound and
// queue a request, and one service goroutine per backend opens, checks,
// clips and executes it. docs/replay.md describes the backends and their
// counters.
package backend

import (
	"fmt"

	"github.com/predictio/predictio/policies"
)

// Backend names.
const (
	NameKernel = "kernel"
	NameKmod   = "kmod"
	NameDirect = "direct"
	NameNone   = "none"
)

// Backend is a policies.Backend that can be closed.
type Backend interface {
	policies.Backend
	// Close waits until every accepted request has been executed (or
	// dropped), stops the backend and returns its final report. Submit
	// after Close fails with ErrClosed; Stats keeps answering.
	Close() (Report, error)
}

// Report is a backend's account of a run: its Stats and what they have no
// field for.
type Report struct {
	Stats policies.BackendStats
	// PagesDropped counts pages of requests dropped at a bound (Stats.Dropped
	// counts the requests).
	PagesDropped uint64
	// PagesRefused counts requested pages not read because their file
	// could not be opened, is not the registered file any more, or is not
	// registered at all (Stats.Rejected counts unregistered requests).
	PagesRefused uint64
	// PagesStale counts requested pages of files unregistered (the program
	// done with them) while their request was queued: no warning.
	PagesStale uint64
	// BusyNS is the time the service goroutine spent on requests (opening
	// and checking files, looking at the cache, issuing), and AcquireNS the
	// part of it opening files and re-checking their paths (Acquires
	// times): what the host model's issuer costs stand for. The kernel and
	// kmod backends count them; the others leave them 0.
	BusyNS, AcquireNS, Acquires uint64
	// OpenNS is the part of AcquireNS opening files (Opens of them, one
	// per file prefetched from); the rest re-checks paths.
	OpenNS, Opens uint64
	// AdviseNS is the time from submitting each io_uring FADVISE to
	// reaping its completion, summed over Advised of them (the kernel
	// backend): the kernel's io-wq workers run them after the submission,
	// and the service goroutine reaps between requests, so it is an upper
	// bound of when their reads were issued.
	AdviseNS, Advised uint64
	// PipelineNS is the time from Submit of each FADVISE's request to the
	// FADVISE's completion, summed over Advised of them: the whole delay
	// between a policy's request and its read reaching the device (the
	// queue, the service goroutine and the kernel's io-wq), as the host
	// model's advise delay stands for it.
	PipelineNS uint64
	// Via says how prefetches were executed.
	Via string
	// Warnings name failures and refusals, with the first error of each.
	Warnings []string
}

// Options configure the page-cache backends made by New.
type Options struct {
	// PageSize is the page size prefetch ranges count in; 0 means the
	// system's.
	PageSize int
	// Queue bounds the ranges queued for the service goroutine; 0 means
	// 4096.
	Queue int
	// InFlight bounds the pages queued or being issued; 0 means 8192.
	// Requests past either bound are dropped and counted.
	InFlight int
	// Readahead makes the kernel backend use readahead(2) instead of
	// FADVISE(WILLNEED).
	Readahead bool
	// Issued, when set, is called from the service goroutine with each
	// range of pages the backend hands to the kernel (after filtering
	// cached pages), before it does.
	Issued func(file uint32, first, n uint64)
}

// New returns the kernel, kmod or none backend over reg. The direct
// backend needs a cache: NewDirect.
func New(name string, reg *Registry, o Options) (Backend, error) {
	switch name {
	case NameKernel:
		return NewKernel(reg, o), nil
	case NameKmod:
		b, err := NewKmod(reg, o)
		if err != nil {
			return nil, err
		}
		return b, nil
	case NameNone:
		return NewNone(), nil
	case NameDirect:
		return nil, fmt.Errorf("create backend %q: needs a user-space cache; use NewDirect", name)
	}
	return nil, fmt.Errorf("create backend %q: unknown; use kernel, kmod, direct or none", name)
}

// None counts requests and executes none: the baseline.
type None struct {
	counters
}

// NewNone returns a backend that discards every request.
func NewNone() *None { return &None{} }

// Submit counts req.
func (b *None) Submit(req *policies.Request) error {
	b.count(req)
	return nil
}

// Close returns the counts.
func (b *None) Close() (Report, error) {
	return b.report("none: requests are counted and discarded"), nil
}
