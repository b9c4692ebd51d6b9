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
	// PhaseSeconds is the duration of each of the three measurements.
	PhaseSeconds float64 `json:"phase_seconds,omitempty"`
}
