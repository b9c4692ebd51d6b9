package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/predictio/predictio/formats"
)

// Device is the storage model: QueueDepth requests are served in parallel,
// each pays LatencyNS, then crosses a shared channel one after another:
// RequestNS, plus its pages' transfer at BytesPerSec. The 4 KiB random-read
// throughput of the model is therefore min(QueueDepth/(LatencyNS+c), 1/c)
// requests per ns, c = RequestNS plus the transfer time of one page.
//
// With QueueLatencyNS, a request's latency depends on the requests in
// flight when it starts: QueueLatencyNS[k] with k others in flight, so
// that the model serves each depth of a measured curve at its throughput.
type Device struct {
	Name string `json:"name"`
	// Source says where the figures come from: a preset, a profile file,
	// this machine's cached profile (with its date).
	Source      string  `json:"source,omitempty"`
	LatencyNS   int64   `json:"latency_ns"`    // per-request access latency, excluding transfer
	BytesPerSec float64 `json:"bytes_per_sec"` // sequential transfer bandwidth shared by all requests
	QueueDepth  int     `json:"queue_depth"`   // requests served in parallel
	// DirectBytesPerSec, when set, is the O_DIRECT sequential rate of a
	// profile whose BytesPerSec is the rate of uncached reads through the
	// page cache: the rate for a model of O_DIRECT reads (replay's direct
	// backend).
	DirectBytesPerSec float64 `json:"direct_bytes_per_sec,omitempty"`
	// RequestNS is each request's time on the channel beyond its pages'
	// transfer (0 in the presets).
	RequestNS int64 `json:"request_ns,omitempty"`
	// QueueLatencyNS, when set, holds QueueDepth latencies (excluding the
	// transfer), by the number of other requests in flight, 0 to
	// QueueDepth-1; LatencyNS is then its first.
	QueueLatencyNS []int64 `json:"queue_latency_ns,omitempty"`
	// SyncLatencyNS, when set with QueueLatencyNS, holds the same for
	// demand reads: requests a program's thread waits for, from the
	// profile's synchronous curve.
	SyncLatencyNS []int64 `json:"sync_latency_ns,omitempty"`
	// Idle, when set, is how much longer than back to back a request
	// takes that starts with nothing in flight, by how long the device
	// has been idle (ascending gaps; linear between them, the last held
	// beyond it, nothing below the first).
	Idle []IdleCost `json:"idle,omitempty"`
	// Host is the CPU side of the model; nil leaves it out.
	Host *Host `json:"host,omitempty"`
}

// IdleCost is the latency a request adds after the device idled GapNS.
type IdleCost struct {
	GapNS   int64 `json:"gap_ns"`
	ExtraNS int64 `json:"extra_ns"`
}

// idleCosts converts a profile's idle curve: each point's latency less the
// first's (the shortest gap: back to back). It returns nil for fewer than
// two points.
func idleCosts(pts []formats.IdlePoint) ([]IdleCost, error) {
	if len(pts) < 2 {
		return nil, nil
	}
	if len(pts) > 64 {
		return nil, fmt.Errorf("field idle has %d points, want at most 64", len(pts))
	}
	out := make([]IdleCost, len(pts))
	for i, p := range pts {
		switch {
		case p.GapNS > 10e9 || i > 0 && p.GapNS <= pts[i-1].GapNS:
			return nil, fmt.Errorf("field idle[%d].gap_ns is %d, want ascending gaps up to 10 s", i, p.GapNS)
		case p.P50NS == 0 || p.P50NS > 10e9:
			return nil, fmt.Errorf("field idle[%d].p50_ns is %d, want 1 ns..10 s", i, p.P50NS)
		}
		out[i] = IdleCost{GapNS: int64(p.GapNS), ExtraNS: max(int64(p.P50NS)-int64(pts[0].P50NS), 0)}
	}
	return out, nil
}

// idleExtra returns the latency a request adds after the device idled gap.
func idleExtra(c []IdleCost, gap int64) int64 {
	if len(c) == 0 || gap <= c[0].GapNS {
		return 0
	}
	i := 1
	for i < len(c) && c[i].GapNS < gap {
		i++
	}
	if i == len(c) {
		return c[i-1].ExtraNS
	}
	a, b := c[i-1], c[i]
	// In floating point: the product of two 10 s spans overflows int64.
	return a.ExtraNS + int64(float64(b.ExtraNS-a.ExtraNS)*float64(gap-a.GapNS)/float64(b.GapNS-a.GapNS))
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
	return Device{Name: name, Source: "preset", LatencyNS: int64(math.Round(per - xfer)), BytesPerSec: seqBPS, QueueDepth: qd}
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

// DeviceFromProfile builds the model from a measured profile so that it
// reproduces its measurements. QueueDepth is the profile's depth.
//
// With a queue curve (the throughput at depths 1 to QueueDepth), a
// request with k others in flight waits the mean latency of depth k+1,
// (k+1)/IOPS, interpolated between the measured depths, less one page's
// transfer at the sequential bandwidth, which the channel adds; RequestNS
// is 0. A virtio disk here read 34 K 4 KiB requests a second at QD1, 91 K
// at QD4 (44 µs each) and 163 K at QD32 (197 µs): latency grows with
// depth well before throughput saturates, which no fixed latency plus a
// channel reproduces (that model, fitted to QD1 and QD32, served QD4 at
// 139 K).
//
// Without one (profiles before the curve), the channel's time per 4 KiB
// request is the inverse of the random-read throughput at QueueDepth
// (RequestNS is what it adds to a page's transfer), and LatencyNS is the
// QD1 median latency less the channel's time.
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
	// Every read the model serves goes through the page cache: where the
	// profile measured that rate, a request's pages move at it, not at
	// the O_DIRECT sequential rate (the python3 launch's read-around of
	// 5.2 MB took 4.5 ms, 1.2 GB/s, where 1 MiB O_DIRECT reads at QD 4
	// ran 3.0 GB/s).
	// (HostFromProfile, below, refuses a rate out of range.)
	rate := p.SeqReadBytesPerSec
	if p.Host != nil && p.Host.ColdReadBytesPerSec > 0 {
		rate = p.Host.ColdReadBytesPerSec
	}
	xfer := 4096 / rate * 1e9
	lat := float64(p.ReadLatencyNS) - xfer
	if lat < 0 {
		lat = 0
	}
	name := p.Name
	if name == "" {
		name = "profile"
	}
	src := "device profile"
	if !p.MeasuredAt.IsZero() {
		src += " measured " + p.MeasuredAt.UTC().Format("2006-01-02")
	}
	host, err := HostFromProfile(p.Host)
	if err != nil {
		return Device{}, fmt.Errorf("load device profile: %w", err)
	}
	d := Device{Name: name, Source: src, LatencyNS: int64(lat), BytesPerSec: rate, QueueDepth: p.QueueDepth, Host: host}
	if rate != p.SeqReadBytesPerSec {
		d.DirectBytesPerSec = p.SeqReadBytesPerSec
	}
	if d.Idle, err = idleCosts(p.Idle); err != nil {
		return Device{}, fmt.Errorf("load device profile: %w", err)
	}
	if len(p.Queue) >= 2 {
		q, err := queueLatencies("queue", p.Queue, p.QueueDepth, xfer, nil)
		if err != nil {
			return Device{}, fmt.Errorf("load device profile: %w", err)
		}
		d.QueueLatencyNS, d.LatencyNS = q, q[0]
		if len(p.SyncQueue) >= 2 {
			if d.SyncLatencyNS, err = queueLatencies("sync_queue", syncCurve(p), p.QueueDepth, xfer, q); err != nil {
				return Device{}, fmt.Errorf("load device profile: %w", err)
			}
		}
		return d, nil
	}
	if r := p.RandReadBytesPerSec; r > 0 && !math.IsInf(r, 0) {
		req := max(4096/r*1e9-xfer, 0)
		d.LatencyNS = int64(max(lat-req, 0))
		d.RequestNS = int64(math.Round(req))
	}
	return d, nil
}

// syncCurve returns the profile's synchronous curve with its one-thread
// point replaced by the queue curve's QD1 point, which measures the same
// thing (one read in flight at a time) over a phase eight times as long.
// `bench device` gives each synchronous point under a second, and on a
// virtual disk whose latency swings with the host's state from one second
// to the next, that point came out 5-32% below the QD1 phase's p50 in
// seven of nine profiles measured on 2026-12-07 (38.8-46.5 against
// 48.8-58.8 µs; twice equal), while a single-threaded program's reads
// took the QD1 phase's latency (a sqlite3 scan's 18 797 buffered reads
// 65.6 µs each with the kernel's own work). The points of two threads and
// more are kept.
func syncCurve(p *formats.DeviceProfile) []formats.QueuePoint {
	if len(p.Queue) == 0 || p.Queue[0].QD != 1 || p.SyncQueue[0].QD != 1 {
		return p.SyncQueue
	}
	c := append([]formats.QueuePoint(nil), p.SyncQueue...)
	c[0].IOPS, c[0].P50NS = p.Queue[0].IOPS, p.Queue[0].P50NS
	return c
}

// queueLatencies returns the latency with k others in flight, for k below
// depth: the mean latency of the curve at depth k+1 (interpolated between
// its points, the last one held beyond it) less xfer.
//
// With floor set (the synchronous curve, measured to fewer depths than
// the device's), a depth past the curve's last point keeps its
// throughput, and never gets below floor's latency.
func queueLatencies(field string, curve []formats.QueuePoint, depth int, xfer float64, floor []int64) ([]int64, error) {
	mean := make([]float64, len(curve))
	for i, pt := range curve {
		switch {
		case pt.QD < 1 || pt.QD > depth || i == 0 && pt.QD != 1 || i > 0 && pt.QD <= curve[i-1].QD:
			return nil, fmt.Errorf("field %s[%d].qd is %d, want depths ascending from 1 to queue_depth %d", field, i, pt.QD, depth)
		case !(pt.IOPS >= 1) || pt.IOPS > 1e9 || float64(pt.QD)/pt.IOPS > 10:
			return nil, fmt.Errorf("field %s[%d].iops is %v, want 1..1e9 and at most 10 s a request (qd/iops)", field, i, pt.IOPS)
		}
		mean[i] = float64(pt.QD) / pt.IOPS * 1e9
	}
	out := make([]int64, depth)
	j := 0
	last := curve[len(curve)-1]
	for k := range out {
		q := k + 1
		for j+1 < len(curve) && curve[j+1].QD <= q {
			j++
		}
		m, past := mean[j], floor != nil && q > last.QD
		switch {
		case j+1 < len(curve):
			a, b := curve[j], curve[j+1]
			m += (mean[j+1] - mean[j]) * float64(q-a.QD) / float64(b.QD-a.QD)
		case past:
			m = float64(q) / last.IOPS * 1e9
		}
		out[k] = int64(math.Round(max(m-xfer, 0)))
		if past {
			out[k] = max(out[k], floor[k])
		}
	}
	return out, nil
}

// queueNote says how the device's latency grows with the requests in
// flight, or, for a measured profile without a queue curve, that it is
// fitted to two depths only; "" for presets.
func (d Device) queueNote(calibrated bool) string {
	q := d.QueueLatencyNS
	if q == nil {
		if !calibrated {
			return ""
		}
		return "the device profile has no queue curve (measured before it was added; measure again with 'predictio bench device'): " +
			"its latency is the QD1 one plus a channel fitted to the full depth, which serves moderate depths too fast"
	}
	// A 4 KiB read's: the latency and its page's transfer.
	xfer := 4096 / d.BytesPerSec * 1e9
	at := func(l []int64, k int) float64 { return (float64(l[min(k, len(l)-1)]) + xfer) / 1e3 }
	n := fmt.Sprintf("device latency of a 4 KiB read from the profile's queue curve: %.0f µs alone, %.0f µs with 3 others in flight, %.0f µs with %d",
		at(q, 0), at(q, 3), at(q, len(q)-1), len(q)-1)
	if s := d.SyncLatencyNS; s != nil {
		n += fmt.Sprintf("; a demand read, from threads of pread: %.0f µs alone, %.0f µs with 3 others", at(s, 0), at(s, 3))
	}
	if d.Idle == nil {
		return n + "; the profile has no idle curve (measured before 2026-12-06; measure again with 'predictio bench device'): a read after the device idled is modelled as fast as one right after another"
	}
	return n + fmt.Sprintf("; a read after the device idled 1 ms takes %.0f µs longer, after 10 ms %.0f µs", float64(idleExtra(d.Idle, 1e6))/1e3, float64(idleExtra(d.Idle, 1e7))/1e3)
}

func (d Device) validate() error {
	if d.QueueDepth < 1 {
		return errors.New("device queue depth must be at least 1")
	}
	if !(d.BytesPerSec > 0) {
		return errors.New("device bandwidth must be positive")
	}
	negative := func(l int64) bool { return l < 0 }
	if negative(d.LatencyNS) || negative(d.RequestNS) || slices.ContainsFunc(d.QueueLatencyNS, negative) || slices.ContainsFunc(d.SyncLatencyNS, negative) {
		return errors.New("device latency and request time must not be negative")
	}
	if d.QueueLatencyNS != nil && len(d.QueueLatencyNS) != d.QueueDepth || d.SyncLatencyNS != nil && len(d.SyncLatencyNS) != d.QueueDepth {
		return fmt.Errorf("device has %d queue latencies and %d synchronous ones, want its queue depth %d", len(d.QueueLatencyNS), len(d.SyncLatencyNS), d.QueueDepth)
	}
	if d.SyncLatencyNS != nil && d.QueueLatencyNS == nil {
		return errors.New("device has synchronous queue latencies without queue latencies")
	}
	return nil
}

// RandReadBytesPerSec is the model's 4 KiB random-read throughput at full
// queue depth.
func (d Device) RandReadBytesPerSec() float64 {
	x := 4096/d.BytesPerSec*1e9 + float64(d.RequestNS)
	lat := d.LatencyNS
	if n := len(d.QueueLatencyNS); n > 0 {
		lat = d.QueueLatencyNS[n-1]
	}
	perReq := (float64(lat) + x) / float64(d.QueueDepth)
	if perReq < x {
		perReq = x
	}
	return 4096 / perReq * 1e9
}

// deviceState is the model's queue, shared by every thread of a lane.
//
// Threads have their own clocks, so requests may arrive out of time order:
// one thread's request at t can be submitted after another's at t' > t.
// The model therefore keeps time-indexed state. slots holds when each of
// the QueueDepth service slots frees, sorted, and a request takes the one
// that frees first. busy holds the transfer channel's busy spans, sorted
// and disjoint: a request's pages cross the channel in the earliest idle
// time from its transfer start on, filling gaps that requests submitted
// earlier left before later ones, and spilling over several gaps if need
// be. With submissions in time order (one thread) this is the FIFO channel
// of the model's description, and the spans stay one.
type deviceState struct {
	latency int64
	qlat    []int64 // Device.QueueLatencyNS, or nil
	slat    []int64 // Device.SyncLatencyNS, else qlat
	nsPerPg float64
	reqNS   int64   // a request's channel time beyond its pages
	onePage int64   // channel time of a one-page request
	slots   []int64 // free times, sorted from slots[head] on (a ring)
	head    int
	busy    []span // channel busy spans, sorted, disjoint
	floor   int64  // time before which the channel counts as busy (spans dropped)
	idle    []IdleCost
	rates   *FileRates // per-file scales of a request's time, or nil
}

// span is a busy interval [start, end) of the transfer channel.
type span struct{ start, end int64 }

// maxSpans bounds the channel's remembered spans; older ones are dropped
// and the time before them counts as busy.
const maxSpans = 256

func newDeviceState(d Device, pageSize int) *deviceState {
	s := &deviceState{
		latency: d.LatencyNS,
		nsPerPg: float64(pageSize) / d.BytesPerSec * 1e9,
		reqNS:   d.RequestNS,
		qlat:    d.QueueLatencyNS,
		slat:    d.QueueLatencyNS,
		slots:   make([]int64, d.QueueDepth),
		idle:    d.Idle,
	}
	if d.SyncLatencyNS != nil {
		s.slat = d.SyncLatencyNS
	}
	s.onePage = d.RequestNS + int64(s.nsPerPg+0.5)
	return s
}

// submit issues a read of n pages at time now and returns its completion
// time.
func (s *deviceState) submit(now int64, n uint64) int64 { return s.submitAt(now, n, s.qlat, 1, 1) }

// submitSync is submit of a demand read, which a thread waits for: with
// the synchronous curve's latencies.
func (s *deviceState) submitSync(now int64, n uint64) int64 { return s.submitAt(now, n, s.slat, 1, 1) }

// submitFor is submit of pages of file, its transfer at the file's scale
// (FileRates).
func (s *deviceState) submitFor(now int64, n uint64, file uint32) int64 {
	if s.rates == nil {
		return s.submitAt(now, n, s.qlat, 1, 1)
	}
	return s.submitAt(now, n, s.qlat, 1, s.rates.TransferScale(file))
}

// submitSyncFor is submitSync of pages of file, its latency at the
// FileRates' demand-read scale and its transfer at the file's.
func (s *deviceState) submitSyncFor(now int64, n uint64, file uint32) int64 {
	if s.rates == nil {
		return s.submitAt(now, n, s.slat, 1, 1)
	}
	return s.submitAt(now, n, s.slat, s.rates.Latency, s.rates.TransferScale(file))
}

// submitAt is submit with latencies lat by depth (nil: the fixed one),
// the request's latency scaled by fl and its transfer by fx.
func (s *deviceState) submitAt(now int64, n uint64, lat []int64, fl, fx float64) int64 {
	start := max(now, s.slots[s.head])
	l := s.latencyAt(start, lat)
	d := s.onePage
	if n != 1 {
		d = s.reqNS + int64(float64(n)*s.nsPerPg+0.5)
	}
	if fl != 1 {
		l = int64(float64(l)*fl + 0.5)
	}
	if fx != 1 {
		d = int64(float64(d)*fx + 0.5)
	}
	x := start + l
	var done int64
	if k := len(s.busy); k > 0 && x >= s.busy[k-1].start && x <= s.busy[k-1].end {
		// In order, queued behind the last span: extend it.
		done = s.busy[k-1].end + d
		s.busy[k-1].end = done
	} else {
		done = s.transfer(x, d)
	}
	if q := len(s.slots); q == 1 {
		s.slots[0] = done
	} else if last := s.head - 1; last >= 0 && s.slots[last] <= done || last < 0 && s.slots[q-1] <= done {
		// The latest completion so far: it takes the popped slot's place
		// at the end of the ring.
		s.slots[s.head] = done
		if s.head++; s.head == q {
			s.head = 0
		}
	} else {
		s.free(done)
	}
	return done
}

// submitOne is submitSync of one page, with the in-order cases inline.
func (s *deviceState) submitOne(now int64) int64 {
	start := max(now, s.slots[s.head])
	x := start + s.latencyAt(start, s.slat)
	k := len(s.busy)
	if k == 0 || x < s.busy[k-1].start {
		return s.submitSync(now, 1)
	}
	last := &s.busy[k-1]
	var done int64
	if x <= last.end {
		done = last.end + s.onePage
		last.end = done
	} else {
		done = x + s.onePage
		s.busy = append(s.busy, span{x, done})
		if k >= 2*maxSpans {
			s.trim()
		}
	}
	q := len(s.slots)
	if j := s.head - 1; q > 1 && (j >= 0 && s.slots[j] <= done || j < 0 && s.slots[q-1] <= done) {
		s.slots[s.head] = done
		if s.head++; s.head == q {
			s.head = 0
		}
		return done
	}
	if q == 1 {
		s.slots[0] = done
		return done
	}
	s.free(done)
	return done
}

// latencyAt returns the latency of a request that starts at start: with a
// queue curve lat, that of the number of requests still in flight then
// (the slots that free after start).
func (s *deviceState) latencyAt(start int64, lat []int64) int64 {
	if lat == nil {
		return s.latency
	}
	q := len(s.slots)
	// The ring is sorted from head: find the first slot freeing after start.
	lo, hi := 0, q
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		i := s.head + m
		if i >= q {
			i -= q
		}
		if s.slots[i] > start {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == q && s.idle != nil {
		// Nothing in flight: the device has idled since the latest
		// completion, the ring's last slot.
		last := s.head - 1
		if last < 0 {
			last = q - 1
		}
		return lat[0] + idleExtra(s.idle, start-s.slots[last])
	}
	return lat[q-lo]
}

// free replaces the slot that freed first with one that frees at done,
// keeping the ring sorted.
func (s *deviceState) free(done int64) {
	q := len(s.slots)
	i := s.head // the popped slot: logically the last one now
	if s.head++; s.head == q {
		s.head = 0
	}
	s.slots[i] = done
	for k := q - 1; k > 0; k-- { // bubble back while the previous is later
		j := i - 1
		if j < 0 {
			j = q - 1
		}
		if s.slots[j] <= done {
			return
		}
		s.slots[i], s.slots[j] = s.slots[j], done
		i = j
	}
}

// transfer moves d ns of pages across the channel from time x on and
// returns when the last of them has crossed.
func (s *deviceState) transfer(x, d int64) int64 {
	x = max(x, s.floor)
	b := s.busy
	n := len(b)
	if n == 0 || x >= b[n-1].start {
		// In order: after, or queued behind, the last span.
		cur := x
		if n > 0 {
			cur = max(x, b[n-1].end)
		}
		s.extend(cur, d)
		return cur + d
	}
	// Out of order: fill the gaps from the first span ending after x.
	i, _ := slices.BinarySearchFunc(b, x, func(sp span, t int64) int { return cmp.Compare(sp.end, t+1) })
	cur, rem := x, d
	for i < len(s.busy) {
		sp := s.busy[i]
		if cur < sp.start {
			use := min(rem, sp.start-cur)
			s.busy = slices.Insert(s.busy, i, span{cur, cur + use})
			i++
			cur += use
			if rem -= use; rem == 0 {
				s.trim()
				return cur
			}
		}
		cur = max(cur, sp.end)
		i++
	}
	s.extend(cur, rem)
	return cur + rem
}

// extend adds [cur, cur+d) at the end of the channel's spans.
func (s *deviceState) extend(cur, d int64) {
	if n := len(s.busy); n > 0 && s.busy[n-1].end == cur {
		s.busy[n-1].end += d
		return
	}
	s.busy = append(s.busy, span{cur, cur + d})
	s.trim()
}

// trim drops the oldest spans beyond maxSpans, amortized: the time before
// the newest maxSpans spans then counts as busy.
func (s *deviceState) trim() {
	if n := len(s.busy); n > 2*maxSpans {
		s.floor = max(s.floor, s.busy[n-maxSpans-1].end)
		s.busy = s.busy[:copy(s.busy, s.busy[n-maxSpans:])]
	}
}
