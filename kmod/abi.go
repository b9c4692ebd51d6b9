package kmod

// Go mirror of kmod/predictio_uapi.h. abi_test.go compiles a C program
// against the header and checks every size and offset below; the `c` tags
// name the C fields.

import "unsafe"

// ABIVersion is PREDICTIO_ABI_VERSION.
const ABIVersion = 1

// Limits and defaults from the uapi header.
const (
	MaxSlots         = 1024
	MaxEntryPages    = 1 << 20
	MaxWorkers       = 64
	MaxRingEntries   = 1 << 20
	MaxQueueCapacity = 1 << 20

	DefaultRingEntries   = 4096
	DefaultQueueCapacity = 1024
	DefaultInFlightLimit = 8192
	DefaultWorkers       = 2
	DefaultItemPages     = 64

	ringEntriesOff = 4096
)

// Entry is struct predictio_entry: pages First .. First+Count-1 of Slot.
type Entry struct {
	Slot  uint32 `c:"slot"`
	Count uint32 `c:"count"`
	First uint64 `c:"first"`
}

// ringHdr is struct predictio_ring_hdr.
type ringHdr struct {
	Head       uint32     `c:"head"`
	_          [15]uint32 `c:"pad0"`
	Tail       uint32     `c:"tail"`
	_          [15]uint32 `c:"pad1"`
	Entries    uint32     `c:"entries"`
	EntrySize  uint32     `c:"entry_size"`
	ABIVersion uint32     `c:"abi_version"`
	_          [13]uint32 `c:"pad2"`
}

// register is struct predictio_register.
type register struct {
	FD   int32  `c:"fd"`
	Slot uint32 `c:"slot"`
}

// Config is struct predictio_config: the bounds of one context. In a
// CONFIG call a zero field keeps the current value.
type Config struct {
	QueueCapacity uint32 `c:"queue_capacity"` // work items the FIFO holds
	InFlightLimit uint32 `c:"inflight_limit"` // pages submitted and not yet read
	Workers       uint32 `c:"workers"`        // kernel workers draining the FIFO
	ItemPages     uint32 `c:"item_pages"`     // maximum pages per work item
	RingEntries   uint32 `c:"ring_entries"`   // request ring entries, a power of two
	Flags         uint32 `c:"flags"`          // reserved, 0
}

// Counters is struct predictio_stats: the module's counters for one
// context. See kmod/predictio_uapi.h for each field.
type Counters struct {
	EntriesReceived  uint64 `c:"entries_received"`
	RejectedSlot     uint64 `c:"rejected_slot"`
	RejectedEOF      uint64 `c:"rejected_eof"`
	RejectedCount    uint64 `c:"rejected_count"`
	RejectedIndex    uint64 `c:"rejected_index"`
	PagesRequested   uint64 `c:"pages_requested"`
	PagesPastEOF     uint64 `c:"pages_past_eof"`
	PagesSubmitted   uint64 `c:"pages_submitted"`
	PagesCached      uint64 `c:"pages_cached"`
	PagesDropped     uint64 `c:"pages_dropped"`
	DroppedQueueFull uint64 `c:"dropped_queue_full"`
	Throttles        uint64 `c:"throttles"`
	Failures         uint64 `c:"failures"`
	Notifies         uint64 `c:"notifies"`
	ItemsQueued      uint64 `c:"items_queued"`
	ItemsDone        uint64 `c:"items_done"`
	QueueLen         uint64 `c:"queue_len"`
	QueueMax         uint64 `c:"queue_max"`
	InFlightPages    uint64 `c:"inflight_pages"`
	InFlightMax      uint64 `c:"inflight_max"`
	LatencyNsTotal   uint64 `c:"latency_ns_total"`
	LatencyNsMax     uint64 `c:"latency_ns_max"`
	NotifyNsTotal    uint64 `c:"notify_ns_total"`
	WorkNsTotal      uint64 `c:"work_ns_total"`
	ReadaheadNsTotal uint64 `c:"readahead_ns_total"`
}

// Rejected is the number of entries rejected for any reason.
func (c *Counters) Rejected() uint64 {
	return c.RejectedSlot + c.RejectedEOF + c.RejectedCount + c.RejectedIndex
}

// ioctl request numbers (asm-generic/ioctl.h encoding).
const (
	iocMagic = 0xB7
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2
)

func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | iocMagic<<8 | nr
}

var (
	iocRegisterFD = ioc(iocRead|iocWrite, 1, unsafe.Sizeof(register{}))
	iocUnregister = ioc(iocWrite, 2, 4)
	iocNotify     = ioc(iocNone, 3, 0)
	iocConfig     = ioc(iocRead|iocWrite, 4, unsafe.Sizeof(Config{}))
	iocStats      = ioc(iocRead, 5, unsafe.Sizeof(Counters{}))
)

// ringSize is PREDICTIO_RING_SIZE(n) rounded up to whole pages.
func ringSize(n uint32, pageSize int) int {
	sz := ringEntriesOff + int(n)*int(unsafe.Sizeof(Entry{}))
	return (sz + pageSize - 1) / pageSize * pageSize
}
