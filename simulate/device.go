package simulate

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/predictio/predictio/formats"
)

// Device is the storage model: QueueDepth requests are served in parallel,
// each pays LatencyNS, then its pages cross a shared transfer channel of
// BytesPerSec. The 4 KiB random-read throughput of the model is therefore
// min(QueueDepth/(LatencyNS+x), 1/x) requests per ns, x the transfer time of
// one page.
type Device struct {
	Name        string  `json:"name"`
	LatencyNS   int64   `json:"latency_ns"`    // per-request access latency, excluding transfer
	BytesPerSec float64 `json:"bytes_per_sec"` // sequential transfer bandwidth shared by all requests
	QueueDepth  int     `json:"queue_depth"`   // requests served in parallel
}

// Paper-derived random-read throughputs (PredictIO §6, fio 4 KiB random
// reads): NVMe 1.26 GiB/s, SATA SSD 240 MiB/s, HDD 1.34 MiB/s.
const (
	nvmeRandBPS    = 1.26 * (1 << 30)
	sataRandBPS    = 240 * (1 << 20)
	hddRandBPS     = 1.34 * (1 << 20)
	nvmeSeqBPS     = 3.0 * (1 << 30)
	sataSeqBPS     = 530 * (1 << 20)
	hddSeqBPS      = 160 * (1 << 20)
	nvmeQueueDepth = 32
	sataQueueDepth = 8
	hddQueueDepth  = 4
)

// derive builds a preset whose QueueDepth parallel 4 KiB requests reach
// randBPS: latency = QueueDepth*4096/randBPS - 4096/seqBPS.
func derive(name string, randBPS, seqBPS float64, qd int) Device {
	per := float64(qd) * 4096 / randBPS * 1e9 // ns per request at depth qd
	xfer := 4096 / seqBPS * 1e9
	return Device{Name: name, LatencyNS: int64(math.Round(per - xfer)), BytesPerSec: seqBPS, QueueDepth: qd}
}

// Presets are the built-in devices, by name.
var Presets = map[string]Device{
	"nvme":     derive("nvme", nvmeRandBPS, nvmeSeqBPS, nvmeQueueDepth),
	"sata-ssd": derive("sata-ssd", sataRandBPS, sataSeqBPS, sataQueueDepth),
	"hdd":      derive("hdd", hddRandBPS, hddSeqBPS, hddQueueDepth),
}

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	n := make([]string, 0, len(Presets))
	for k := range Presets {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Preset returns the named preset device.
func Preset(name string) (Device, error) {
	d, ok := Presets[name]
	if !ok {
		return Device{}, fmt.Errorf("select device %q: want one of %s, or --device-profile FILE", name, strings.Join(PresetNames(), ", "))
	}
	return d, nil
}

// DeviceFromProfile builds the model from a measured profile: LatencyNS is
// the QD1 read latency less one page's transfer, BytesPerSec the sequential
// bandwidth, QueueDepth the profile's depth.
func DeviceFromProfile(p *formats.DeviceProfile) (Device, error) {
	switch {
	case p.Version != formats.DeviceProfileVersion:
		return Device{}, fmt.Errorf("load device profile: field version is %d, want %d", p.Version, formats.DeviceProfileVersion)
	case p.ReadLatencyNS == 0 || p.ReadLatencyNS > 10e9:
		return Device{}, fmt.Errorf("load device profile: field read_latency_ns is %d, want 1..1e10", p.ReadLatencyNS)
	case !(p.SeqReadBytesPerSec > 0) || math.IsInf(p.SeqReadBytesPerSec, 0):
		return Device{}, fmt.Errorf("load device profile: field seqread_bytes_per_sec is %v, want > 0", p.SeqReadBytesPerSec)
	case p.QueueDepth < 1 || p.QueueDepth > 65536:
		return Device{}, fmt.Errorf("load device profile: field queue_depth is %d, want 1..65536", p.QueueDepth)
	}
	xfer := 4096 / p.SeqReadBytesPerSec * 1e9
	lat := float64(p.ReadLatencyNS) - xfer
	if lat < 0 {
		lat = 0
	}
	name := p.Name
	if name == "" {
		name = "profile"
	}
	return Device{Name: name, LatencyNS: int64(lat), BytesPerSec: p.SeqReadBytesPerSec, QueueDepth: p.QueueDepth}, nil
}

func (d Device) validate() error {
	if d.QueueDepth < 1 {
		return errors.New("device queue depth must be at least 1")
	}
	if !(d.BytesPerSec > 0) {
		return errors.New("device bandwidth must be positive")
	}
	if d.LatencyNS < 0 {
		return errors.New("device latency must not be negative")
	}
	return nil
}

// RandReadBytesPerSec is the model's 4 KiB random-read throughput at full
// queue depth.
func (d Device) RandReadBytesPerSec() float64 {
	x := 4096 / d.BytesPerSec * 1e9
	perReq := (float64(d.LatencyNS) + x) / float64(d.QueueDepth)
	if perReq < x {
		perReq = x
	}
	return 4096 / perReq * 1e9
}

// deviceState is the model's queue. Requests complete in submission order
// (the shared channel is FIFO), so the slot that frees first is always the
// one of the oldest outstanding request: a ring of completion times.
type deviceState struct {
	latency  int64
	nsPerPg  float64
	slots    []int64 // completion times, oldest at head
	head     int
	channel  int64
	requests uint64
	pages    uint64
	busyNS   int64
}

func newDeviceState(d Device, pageSize int) *deviceState {
	return &deviceState{
		latency: d.LatencyNS,
		nsPerPg: float64(pageSize) / d.BytesPerSec * 1e9,
		slots:   make([]int64, d.QueueDepth),
	}
}

// submit issues a read of n pages at time now and returns its completion
// time.
func (s *deviceState) submit(now int64, n uint64) int64 {
	start := now
	if free := s.slots[s.head]; free > start {
		start = free
	}
	xfer := start + s.latency
	if s.channel > xfer {
		xfer = s.channel
	}
	done := xfer + int64(float64(n)*s.nsPerPg+0.5)
	s.channel = done
	s.slots[s.head] = done
	if s.head++; s.head == len(s.slots) {
		s.head = 0
	}
	s.requests++
	s.pages += n
	s.busyNS += done - start
	return done
}
