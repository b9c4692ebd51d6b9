// Package policies holds the prediction side of predictio: typed workload
// events, prefetch policies, the dispatcher, normalized page-range requests
// and the Backend interface that executes them.
package policies

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
