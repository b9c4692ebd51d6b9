package formats

import "time"

// DeviceProfileVersion is the version of the device profile JSON format
// written by `predictio bench device` and read by `predictio simulate
// --device-profile` (docs/device-profile.md).
const DeviceProfileVersion = 1

// DeviceProfile describes a storage device for simulate's device model.
// Field names are stable; docs/device-profile.md documents each one.
type DeviceProfile struct {
	Version    int       `json:"version"`
	Name       string    `json:"name"`
	Device     string    `json:"device,omitempty"` // e.g. /dev/vda
	Path       string    `json:"path,omitempty"`   // the scratch file it was measured on
	Kernel     string    `json:"kernel,omitempty"`
	MeasuredAt time.Time `json:"measured_at"`

	// ReadLatencyNS is the median QD1 4 KiB random-read latency.
	ReadLatencyNS uint64 `json:"read_latency_ns"`
	// RandReadBytesPerSec is 4 KiB random-read bandwidth at QueueDepth.
	RandReadBytesPerSec float64 `json:"randread_bytes_per_sec"`
	// SeqReadBytesPerSec is large-block sequential read bandwidth.
	SeqReadBytesPerSec float64 `json:"seqread_bytes_per_sec"`
	// QueueDepth is the depth RandReadBytesPerSec was measured at, and the
	// number of requests the model serves in parallel.
	QueueDepth int `json:"queue_depth"`
	// Queue is the 4 KiB random-read throughput by queue depth, ascending
	// from 1 to QueueDepth: how a request's latency grows with the
	// requests in flight beside it. simulate serves a request at the mean
	// latency of its depth (depth/IOPS) when it has two points or more;
	// profiles measured before it was added have none.
	Queue []QueuePoint `json:"queue,omitempty"`
	// SyncQueue is the same from QD threads that each wait for their own
	// read (pread(2), O_DIRECT), ascending from 1: what a program's
	// threads get on a demand miss, which a virtual machine's wake-ups can
	// make slower than one submitter at the same depth. simulate uses it
	// for demand reads when it has two points or more.
	SyncQueue []QueuePoint `json:"sync_queue,omitempty"`
	// Idle is the median QD1 4 KiB read latency after an idle device, by
	// the idle time before the read, ascending: a virtual machine's disk
	// can take several times longer to answer a read after a few
	// milliseconds of quiet than one right after another. simulate adds
	// the difference to the first point to a request that starts with
	// nothing in flight. Profiles measured before 2026-12-06 have none.
	Idle []IdlePoint `json:"idle,omitempty"`

	// The fields below are informative; simulate does not read them.

	// ReadLatencyP99NS is the p99 of the QD1 4 KiB random reads.
	ReadLatencyP99NS uint64 `json:"read_latency_p99_ns,omitempty"`
	// RandReadIOPS is RandReadBytesPerSec in 4 KiB requests per second.
	RandReadIOPS float64 `json:"randread_iops,omitempty"`
	// SeqBlockSize is the request size of the sequential measurement, at
	// SeqQueueDepth requests in flight.
	SeqBlockSize  int `json:"seq_block_size,omitempty"`
	SeqQueueDepth int `json:"seq_queue_depth,omitempty"`
	// Engine says how it was measured, e.g. "io_uring O_DIRECT".
	Engine string `json:"engine,omitempty"`
	// PhaseSeconds is the duration of each of the four device measurements
	// (the queue depths between 1 and 32 share one).
	PhaseSeconds float64 `json:"phase_seconds,omitempty"`

	// Host is what the machine's CPUs cost a read served from the page
	// cache and a prefetch issued through the kernel backend; simulate
	// reads it. Profiles measured before it was added have none.
	Host *HostCosts `json:"host,omitempty"`
}

// HostCosts are CPU costs of the machine a profile was measured on.
type HostCosts struct {
	// CPUs is how many CPUs the measuring process could run on.
	CPUs int `json:"cpus"`
	// CachedReadNS is the median time of a 4 KiB pread(2) of a page in
	// the page cache; CachedReadPageNS what each further page of a
	// longer read adds (a 64 KiB read).
	CachedReadNS     uint64 `json:"cached_read_ns"`
	CachedReadPageNS uint64 `json:"cached_read_page_ns"`
	// ColdReadNS is the median time of a 4 KiB pread(2) of a page not in
	// the page cache, readahead off (POSIX_FADV_RANDOM), one at a time;
	// ColdReadDirectNS that of an O_DIRECT one, measured alternately with
	// it: their difference is the page cache's part of a demand miss.
	ColdReadNS       uint64 `json:"cold_read_ns"`
	ColdReadDirectNS uint64 `json:"cold_read_direct_ns"`
	// ColdReadBytesPerSec is the rate at which an uncached read through
	// the page cache moves its further bytes: (4 MiB − 4 KiB) over the
	// time a 4 MiB pread(2) takes more than a 4 KiB one, readahead off,
	// the two alternated (medians). A read-around or readahead of many
	// pages costs this, not the O_DIRECT sequential rate. Profiles
	// measured before 2026-12-07 have none (0).
	ColdReadBytesPerSec float64 `json:"cold_read_bytes_per_sec,omitempty"`
	// OpenNS is the median time to open(2) the measured file by its path,
	// fstat(2) and close it, its path and inode cached: what the kernel
	// backend pays to open a file whose lookup a program has done.
	OpenNS uint64 `json:"open_ns"`
	// Prefetch is the time the kernel backend's service takes per request
	// of one range of Pages uncached pages of a cold file (io_uring
	// FADVISE(WILLNEED), cachestat and the path check included), by
	// range length, ascending, measured with nothing else running.
	Prefetch []PrefetchCost `json:"prefetch"`
	// PrefetchCachedNS is the time per request whose pages are all
	// cached (cachestat finds them; nothing is issued).
	PrefetchCachedNS uint64 `json:"prefetch_cached_ns"`
	// PrefetchBusyNS is the time per one-page request while one thread
	// of another program is on a CPU all along, as a program is while a
	// policy prefetches for it: half the rounds a thread reading a cached
	// page of the file (4 KiB preads), half one computing (no system
	// calls). BusySlowdown is how much longer that thread's steps took
	// meanwhile than alone. Both are medians over those rounds.
	PrefetchBusyNS uint64  `json:"prefetch_busy_ns"`
	BusySlowdown   float64 `json:"busy_slowdown"`
	// PrefetchWakeNS is the median time from submitting a one-page request
	// to a backend that had nothing to do until its service goroutine
	// issues it (the goroutine, and on a virtual machine the CPU it slept
	// on, wake up first); SubmitWakeNS is what that submission cost the
	// submitting thread.
	PrefetchWakeNS uint64 `json:"prefetch_wake_ns"`
	SubmitWakeNS   uint64 `json:"submit_wake_ns"`
	// AdviseNS is, in the same pass, the mean time from the backend's
	// submitting a request's io_uring FADVISE to its completion: the
	// kernel's io-wq worker wakes and runs it after the submission, so
	// the pages are read that much after the backend issued them.
	// Profiles measured before it was added have none (0).
	AdviseNS uint64 `json:"advise_ns,omitempty"`
	// PrefetchOwnNS is the backend's own time per one-page request fed
	// one every 50 us (Report.BusyNS less OpenNS: re-checking the path,
	// cachestat and queueing the FADVISE), when the kernel keeps up;
	// Prefetch's points, with every request submitted at once, are what
	// the whole pipeline sustains (the goroutine, io-wq's workers and the
	// device's queue). Profiles measured before 2026-12-07's afternoon
	// have none (0).
	PrefetchOwnNS uint64 `json:"prefetch_own_ns,omitempty"`
	// AdviseCurve is the mean time from the backend's submitting a
	// one-page request's FADVISE to its completion, by the rate requests
	// come at (one every 200, 50, 20, 10 and 5 us, whether or not the
	// last was issued; ascending rates): io-wq's workers queue them as
	// they come faster. Measured with PrefetchOwnNS, in the same passes.
	// simulate models neither yet (docs/device-profile.md).
	AdviseCurve []AdvisePoint `json:"advise_curve,omitempty"`
	// PrefetchVia says how the backend issued them.
	PrefetchVia string `json:"prefetch_via,omitempty"`
}

// AdvisePoint is the mean FADVISE latency (NS) while requests come at
// PerSec a second.
type AdvisePoint struct {
	PerSec float64 `json:"per_sec"`
	NS     uint64  `json:"ns"`
}

// QueuePoint is the 4 KiB random-read throughput at one queue depth, and
// the median latency of its requests.
type QueuePoint struct {
	QD    int     `json:"qd"`
	IOPS  float64 `json:"iops"`
	P50NS uint64  `json:"p50_ns"`
}

// PrefetchCost is the kernel backend's time per request of Pages pages.
type PrefetchCost struct {
	Pages uint32 `json:"pages"`
	NS    uint64 `json:"ns"`
}

// IdlePoint is one point of a profile's idle curve: reads after GapNS of
// no I/O (the median gap measured) took P50NS (median).
type IdlePoint struct {
	GapNS uint64 `json:"gap_ns"`
	P50NS uint64 `json:"p50_ns"`
}
