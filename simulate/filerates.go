package simulate

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/predictio/predictio/formats"
)

// FileRates scale the device model's times by how the recording's own
// cold operations ran against it (FitFileRates), in two parts. One device
// can serve its files at different rates: on this machine's virtual disk
// the blocks of the image's original files (/usr) read at 0.8-1.2 GB/s,
// and a small file's cold read took 60-70 µs plus 6 µs a page, where files
// written since, the device profile's scratch file among them, read at
// 1.7-2.0 GB/s; that is the transfer, per file. And a recording's reads
// that wait alone for the device (queue depth 1) can take longer than the
// profile, measured at another time, says, as the disk's latency drifts;
// that is the latency of a demand read, one for the bundle. A prefetch
// keeps the profile's latency at its depth (docs/simulate.md, "File
// rates").
type FileRates struct {
	// Latency scales a demand read's latency: what the fitted operations
	// of at most 2 pages took beyond the model's transfer, over the
	// model's latency.
	Latency float64 `json:"latency"`
	// Transfer scales the transfer of a file without operations of its
	// own: the recorded service of the bundle's fitted operations of more
	// than 2 pages, less their scaled latency, over the model's transfer.
	Transfer float64 `json:"transfer"`
	// Ops counts the fitted operations, and Files the files with
	// operations of more than 2 pages (a transfer scale of their own);
	// Min and Max are the extreme per-file transfer scales.
	Ops   int     `json:"ops"`
	Files int     `json:"files"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	// Rows is set when the fit stopped early, at the bound on the rows it
	// holds: it was fitted on the first Rows rows.
	Rows uint64 `json:"rows,omitempty"`

	byFile map[uint32]float64
}

// TransferScale returns the factor of file's transfer times.
func (r *FileRates) TransferScale(file uint32) float64 {
	if f, ok := r.byFile[file]; ok {
		return f
	}
	return r.Transfer
}

// Bounds of a fitted scale; the operations of at most smallOpPages pages
// (whose service is mostly latency) that the latency needs; and the
// pseudo-operations at the bundle's transfer scale that a file's own
// ones are pooled with.
const (
	minRateScale = 0.25
	maxRateScale = 8
	smallOpPages = 2
	minSmallOps  = 8
	ratePriorOps = 2
	ratePriorNS  = 250_000
	maxFitOps    = 1 << 18 // reads and faults held (10 MiB)
	maxFitAdds   = 1 << 20 // page-cache insertions held (24 MiB)
)

// fitOp is one cold read or fault of the recording: its span, thread,
// file and the pages inserted for it.
type fitOp struct {
	ts, end int64
	gap     int64 // the device's idle time before it; -1: the first
	tid     uint32
	file    uint32
	pages   uint64
}

// fitAdd is one page-cache insertion row.
type fitAdd struct {
	ts    int64
	tid   uint32
	file  uint32
	pages uint32
}

// FitFileRates reads the bundle's accesses and fits FileRates for d. The
// operations: every read or fault with a service time (format 1.1) whose
// thread inserted pages of its file into the page cache during it, and
// which no other such operation overlapped, so that its service is the
// device's alone; a retried fault counts once. The model's service of
// each is one request of those pages on an idle device: the latency at
// queue depth 1 after the idle gap before it, with the host's
// buffered-read cost, then the transfer. The latency scale is what the
// operations of at most 2 pages took beyond the model's transfer, over the
// model's latency (1 with fewer than 8 of them); a file's transfer scale is what
// its larger operations took beyond their scaled latency over the model's
// transfer, pooled with two operations (and at least 250 µs of transfer)
// at the bundle's scale. Scales are
// bounded to [0.25, 8]. It holds at most 256 Ki reads and faults and 1 Mi
// insertions (34 MiB) and fits on the rows before the bound
// (FileRates.Rows). It returns nil when the bundle has no such operation,
// or when fewer than half of its cold operations ran alone (a program
// whose threads read concurrently: their service times measure the
// queue as much as the device).
func FitFileRates(b *formats.Bundle, d Device, pageSize int) (*FileRates, error) {
	cur, err := b.Accesses()
	if err != nil {
		return nil, fmt.Errorf("fit file rates: %w", err)
	}
	defer cur.Close()
	var ops []fitOp
	var adds []fitAdd
	lastFault := map[uint32]uint64{} // by thread: a retried fault's second row shares its op
	var rows uint64
	for cur.Next() && len(ops) < maxFitOps && len(adds) < maxFitAdds {
		rows++
		a := cur.At()
		switch {
		case a.Kind == formats.KindCacheAdd:
			adds = append(adds, fitAdd{int64(a.TS), a.TID, a.FileID, a.NPages})
		case (a.Kind == formats.KindRead || a.Kind == formats.KindFault) && a.EndNS > a.TS:
			if a.Kind == formats.KindFault && a.Op != 0 {
				if lastFault[a.TID] == a.Op {
					continue
				}
				lastFault[a.TID] = a.Op
			}
			ops = append(ops, fitOp{ts: int64(a.TS), end: int64(a.EndNS), tid: a.TID, file: a.FileID})
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("fit file rates: %w", err)
	}
	r := fitRates(ops, adds, d, pageSize)
	if r != nil && (len(ops) == maxFitOps || len(adds) == maxFitAdds) {
		r.Rows = rows
	}
	return r, nil
}

// fitRates is FitFileRates on the rows read.
func fitRates(ops []fitOp, adds []fitAdd, d Device, pageSize int) *FileRates {
	attachPages(ops, adds)
	alone, cold := aloneOps(ops)
	if len(alone) == 0 || 2*len(alone) < cold {
		// Mostly concurrent: the few operations that ran alone are a
		// biased sample (a 4-thread fio: 28 of 8000, at its start and
		// end, 0.56 times the profile's latency), and the rest measure
		// the queue as much as the device.
		return nil
	}
	m := newRateModel(d, pageSize)
	r := &FileRates{Latency: fitLatency(alone, m), Ops: len(alone), byFile: map[uint32]float64{}}
	r.fitTransfer(alone, m)
	return r
}

// boundScale bounds a fitted scale to [minRateScale, maxRateScale].
func boundScale(x float64) float64 { return min(max(x, minRateScale), maxRateScale) }

// fitLatency returns the latency scale: what the operations of at most
// smallOpPages pages, whose service is mostly latency, took beyond the
// model's transfer, over the model's latency; 1 with fewer than
// minSmallOps of them.
func fitLatency(alone []fitOp, m rateModel) float64 {
	var rest, lat float64
	small := 0
	for _, o := range alone {
		if o.pages <= smallOpPages {
			l, x := m.parts(o)
			rest += float64(o.end-o.ts) - float64(x)
			lat += float64(l)
			small++
		}
	}
	if small < minSmallOps || lat <= 0 {
		return 1
	}
	return boundScale(rest / lat)
}

// fitTransfer sets r's transfer scales, given its latency scale: what the
// larger operations took beyond their scaled latency over the model's
// transfer, for the bundle (Transfer) and by file, each file's pooled
// with the bundle's.
func (r *FileRates) fitTransfer(alone []fitOp, m rateModel) {
	type sums struct{ rest, xfer float64 }
	per := map[uint32]*sums{}
	var all sums
	large := 0
	for _, o := range alone {
		if o.pages <= smallOpPages {
			continue
		}
		l, x := m.parts(o)
		p := per[o.file]
		if p == nil {
			p = &sums{}
			per[o.file] = p
		}
		rest := float64(o.end-o.ts) - r.Latency*float64(l)
		p.rest += rest
		p.xfer += float64(x)
		all.rest += rest
		all.xfer += float64(x)
		large++
	}
	r.Files = len(per)
	r.Transfer, r.Min, r.Max = 1, 1, 1
	if large == 0 || all.xfer <= 0 {
		return
	}
	r.Transfer = boundScale(all.rest / all.xfer)
	// The pseudo-operations' transfer: two average ones, and at least
	// 250 µs, so that a file's few small reads, whose latency varies by
	// more than their transfer takes, do not set its scale alone.
	prior := max(ratePriorOps*all.xfer/float64(large), ratePriorNS)
	r.Min, r.Max = maxRateScale, minRateScale
	for f, p := range per {
		x := boundScale((p.rest + prior*r.Transfer) / (p.xfer + prior))
		r.byFile[f] = x
		r.Min, r.Max = min(r.Min, x), max(r.Max, x)
	}
}

// aloneOps returns the operations that inserted pages and that no other
// such operation overlapped, in time order, each with the device's idle
// time before it, and how many inserted pages. ops is reordered.
func aloneOps(ops []fitOp) ([]fitOp, int) {
	cold := slices.DeleteFunc(ops, func(o fitOp) bool { return o.pages == 0 })
	slices.SortFunc(cold, func(a, b fitOp) int { return cmp.Compare(a.ts, b.ts) })
	var out []fitOp
	var prevEnd int64 // the latest end of the operations before
	for i, o := range cold {
		alone := (i == 0 || o.ts >= prevEnd) && (i+1 == len(cold) || cold[i+1].ts >= o.end)
		o.gap = -1
		if i > 0 {
			o.gap = o.ts - prevEnd
		}
		prevEnd = max(prevEnd, o.end)
		if alone {
			out = append(out, o)
		}
	}
	return out, len(cold)
}

// rateModel is the device model's service of one request on an idle
// device, in its two parts.
type rateModel struct {
	s        *deviceState
	lat, mis int64
}

func newRateModel(d Device, pageSize int) rateModel {
	m := rateModel{s: newDeviceState(d, pageSize), lat: d.LatencyNS}
	switch {
	case d.SyncLatencyNS != nil:
		m.lat = d.SyncLatencyNS[0]
	case d.QueueLatencyNS != nil:
		m.lat = d.QueueLatencyNS[0]
	}
	if d.Host != nil {
		m.mis = d.Host.MissNS
	}
	return m
}

// parts returns the model's latency of o (at queue depth 1, after its idle
// gap, with the host's buffered-read cost) and its transfer.
func (m rateModel) parts(o fitOp) (lat, xfer int64) {
	lat = m.lat + m.mis
	if o.gap >= 0 {
		lat += idleExtra(m.s.idle, o.gap)
	}
	xfer = m.s.onePage
	if o.pages != 1 {
		xfer = m.s.reqNS + int64(float64(o.pages)*m.s.nsPerPg+0.5)
	}
	return lat, xfer
}

// attachPages sets each operation's pages: those its thread inserted into
// the page cache for its file during its span.
func attachPages(ops []fitOp, adds []fitAdd) {
	type key struct{ tid, file uint32 }
	by := map[key][]fitAdd{}
	for _, a := range adds {
		k := key{a.tid, a.file}
		by[k] = append(by[k], a)
	}
	for _, l := range by {
		slices.SortFunc(l, func(a, b fitAdd) int { return cmp.Compare(a.ts, b.ts) })
	}
	for i := range ops {
		o := &ops[i]
		l := by[key{o.tid, o.file}]
		j, _ := slices.BinarySearchFunc(l, o.ts, func(a fitAdd, t int64) int { return cmp.Compare(a.ts, t) })
		for ; j < len(l) && l[j].ts <= o.end; j++ {
			o.pages += uint64(l[j].pages)
		}
	}
}

// Note describes the scales for a report.
func (r *FileRates) Note() string {
	from := "the recording"
	if r.Rows > 0 {
		from = fmt.Sprintf("the first %d rows of the recording", r.Rows)
	}
	return fmt.Sprintf("file rates: device times scaled by the cold operations in %s (%d operations, %d files with larger ones): a demand read's latency ×%.2f, transfers ×%.2f (×%.2f to ×%.2f by file); --file-rates profile turns this off",
		from, r.Ops, r.Files, r.Latency, r.Transfer, r.Min, r.Max)
}
