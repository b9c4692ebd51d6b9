// Package policies holds the prediction side of predictio: typed workload
// events, prefetch policies, the dispatcher, normalized page-range requests
// and the Backend interface that executes them.
package policies

import "github.com/predictio/predictio/formats"

// Range is a run of pages: First, First+1, ..., First+N-1.
type Range struct {
	First uint64
	N     uint32
}

// Request asks a backend to prefetch page ranges of one file. Normalized
// requests have sorted, disjoint, non-adjacent ranges of bounded length.
type Request struct {
	File   uint32 // file_id of the bundle, or a backend-registered id
	Ranges []Range
	// Meta asks the runtime to warm the file's metadata before its pages:
	// the lookups of its path, its inode and its directory's entries (the
	// launch policy sets it). Backends that prefetch only pages ignore it;
	// a request may carry Meta with no ranges.
	Meta bool
}

// Backend executes prefetch requests. Submit never blocks on I/O: a backend
// that is full drops the request and counts it. The request's memory may be
// reused by the caller once Submit returns.
type Backend interface {
	Submit(req *Request) error
	Stats() BackendStats
}

// BackendStats are the counters every backend reports, so that replay can
// compare backends side by side.
type BackendStats struct {
	Requests       uint64 // requests received
	PagesRequested uint64 // pages named by requests
	PagesSubmitted uint64 // pages sent to the device or kernel
	PagesCached    uint64 // pages skipped because already cached or in flight
	PagesPastEOF   uint64 // pages clipped at end of file
	Dropped        uint64 // requests (or entries) dropped because a bound was hit
	Rejected       uint64 // invalid requests
	Failures       uint64 // I/O errors
	InFlightMax    uint64 // high-water mark of in-flight pages
	Throttled      uint64 // times the in-flight limit deferred or dropped work
}

// EventKind is the type of a workload event.
type EventKind uint8

// Event kinds.
const (
	EventFileAccess EventKind = iota + 1
	EventTreeChildEnter
	EventTensorLayout
	EventLayerStart
	EventProcessExec
	numEventKinds
)

// Event is one workload event. Kind says which of the typed payloads is set.
// Events are passed by pointer and reused by their producer: a policy must
// copy what it keeps.
type Event struct {
	Kind EventKind
	TS   uint64 // CLOCK_MONOTONIC nanoseconds
	PID  uint32
	TID  uint32
	File uint32 // file_id

	Access FileAccess     // EventFileAccess
	Tree   TreeChildEnter // EventTreeChildEnter
	Tensor TensorLayout   // EventTensorLayout
	Layer  LayerStart     // EventLayerStart
	Exec   ProcessExec    // EventProcessExec
}

// FileAccess is a kernel-observed access to pages of a file.
type FileAccess struct {
	Kind   formats.AccessKind
	Page   uint64
	NPages uint32
	// End is when the operation behind the access completed (format
	// 1.1 end_ns; Event.TS is then its start); 0 when unknown.
	End uint64
	// Prot is the protection of the mapping behind a fault, map or mmap
	// access (formats.ProtRead, ProtWrite, ProtExec, ProtShared: the
	// bundle's prot column); 0 is unknown (bundles before format 1.1).
	Prot uint8
	// MapFirst and MapPages are that mapping's file range: its first file
	// page (vm_pgoff) and length in pages; MapPages 0 is unknown.
	MapFirst, MapPages uint64
	// Op identifies the operation behind the access: the rows of one
	// syscall or one fault share it (a cold fault that retries gives two
	// rows with one Op); 0 is unknown.
	Op uint64
}

// TreeChildEnter is a B-tree traversal hint: the cursor entered child
// Position (0 = first) of ParentPage, and Children are the upcoming child
// pages, the parent's children after Position in traversal order (the
// entered child is not included).
type TreeChildEnter struct {
	ParentPage uint64
	Position   uint32
	Children   []uint64
}

// TensorLayout describes one tensor's byte extent in a file.
type TensorLayout struct {
	Name   string
	Offset uint64
	Length uint64
}

// LayerStart says a runtime started executing layer Index.
type LayerStart struct {
	Index uint32
}

// ProcessExec says a process started running a program: an exec row of a
// bundle (formats.KindExec) or the live source's exec event. Event.File is
// the file the kernel runs (a script's interpreter); Path is the program
// as it was asked for, resolved (the script, or the command a launch was
// started with), when the producer knows it, else "".
type ProcessExec struct {
	Path string
}

// Emit receives a request from a policy. The request and its ranges are only
// valid during the call.
type Emit func(*Request)

// Policy turns workload events into prefetch requests. It keeps its own
// state; Handle is called from one goroutine at a time.
type Policy interface {
	// Accepts reports whether the policy wants events of kind k.
	Accepts(k EventKind) bool
	// Handle processes one event and emits zero or more requests.
	Handle(ev *Event, emit Emit)
}
