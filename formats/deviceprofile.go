package formats

import "time"

// DeviceProfileVersion is the version of the device profile JSON format
// written by `predictio bench device` and read by `predictio simulate
// --device-profile` (docs/device-profile.md).
const DeviceProfileVersion = 1

// DeviceProfile describes a storage device for simulate's device model.
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
}
