package simulate

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
)

// rateBundle writes a recording of one thread's cold reads, 100 µs
// apart: 20 one-page reads of file 2 whose service is lat times d's, then
// 40 16-page reads of files 1 and 2 in turn whose latency is lat times
// d's and whose transfer is slow times d's for file 1 and d's own for
// file 2. In a second thread, a read of file 3 overlaps one of them
// (neither is the device's alone: both are left out); then come a warm
// read (no page inserted: left out) and a retried one-page fault of file
// 2 (two rows of one operation). It returns the bundle and its recorded
// wall.
func rateBundle(t *testing.T, d Device, lat, slow float64) (string, int64) {
	t.Helper()
	var files []formats.File
	for id := uint32(1); id <= 3; id++ {
		files = append(files, formats.File{ID: id, Dev: 0xfc00000, Ino: uint64(10 + id), Path: "/f" + string(rune('0'+id)), Size: 4096 * 4096, Mode: 0o100644})
	}
	xfer := func(n int64) int64 { return d.RequestNS + int64(float64(n)*4096/d.BytesPerSec*1e9+0.5) }
	one := int64(float64(d.LatencyNS)*lat+0.5) + xfer(1)
	var rows []formats.Access
	ts, op := int64(1e9), uint64(0)
	add := func(a formats.Access) { rows = append(rows, a) }
	read := func(tid, file uint32, page uint64, n int, svc int64) {
		op++
		for p := range uint64(n) {
			add(formats.Access{TS: uint64(ts + 1000 + int64(p)), PID: 1, TID: tid, FileID: file, FirstPage: page + p, NPages: 1, Kind: formats.KindCacheAdd})
		}
		add(formats.Access{TS: uint64(ts), EndNS: uint64(ts + svc), Op: op, Ret: int64(n) * 4096, PID: 1, TID: tid, FileID: file, FirstPage: page, NPages: uint32(n), Kind: formats.KindRead})
	}
	first := ts
	for i := range 60 {
		file, n, svc := uint32(2), 1, one
		if i >= 20 {
			file, n = uint32(1+i%2), 16
			x := xfer(16)
			if file == 1 {
				x = int64(float64(x) * slow)
			}
			svc = int64(float64(d.LatencyNS)*lat+0.5) + x
		}
		read(1, file, uint64(i)*16, n, svc)
		if i == 30 {
			ts += 10
			read(2, 3, 0, 1, 150_000)
			ts -= 10
		}
		ts += svc + 100_000
	}
	op++
	add(formats.Access{TS: uint64(ts), EndNS: uint64(ts + 2000), Op: op, Ret: 4096, PID: 1, TID: 1, FileID: 2, FirstPage: 0, NPages: 1, Kind: formats.KindRead})
	ts += 102_000
	op++
	add(formats.Access{TS: uint64(ts), EndNS: uint64(ts + one), Op: op, PID: 1, TID: 1, FileID: 2, FirstPage: 2000, NPages: 1, Kind: formats.KindFault})
	add(formats.Access{TS: uint64(ts + 2000), PID: 1, TID: 1, FileID: 2, FirstPage: 2000, NPages: 1, Kind: formats.KindCacheAdd})
	add(formats.Access{TS: uint64(ts + 3000), EndNS: uint64(ts + one), Op: op, PID: 1, TID: 1, FileID: 2, FirstPage: 2000, NPages: 1, Kind: formats.KindFault})
	return tracetest.ServiceBundle(t, nil, files, rows, nil), ts + one - first
}

// TestFileRates: a recording whose demand reads waited 1.2 times the
// device model's latency, and whose reads of one file moved their pages
// at a third of its rate, gets those scales, and is predicted within 3%
// of its recorded wall with them, and more than 10% short without;
// operations that overlap and a warm one are left out of the fit, and a
// retried fault counts once.
func TestFileRates(t *testing.T) {
	d := Device{Name: "t", LatencyNS: 50_000, BytesPerSec: 4096 / 2e-6, QueueDepth: 32}
	dir, wall := rateBundle(t, d, 1.2, 3)
	in, err := OpenInput(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	r, err := FitFileRates(in.Bundle, d, in.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	if r == nil {
		t.Fatal("no file rates fitted")
	}
	if r.Ops != 60 || r.Files != 2 {
		t.Errorf("fitted %d operations, %d files with larger ones; want 60 (59 reads and the fault: not the two overlapping reads or the warm one) and 2", r.Ops, r.Files)
	}
	if math.Abs(r.Latency-1.2) > 0.01 {
		t.Errorf("latency scale %.3f, want 1.2", r.Latency)
	}
	// 19 reads of file 1, 20 of file 2, 32 µs of transfer each, pooled
	// with 250 µs at the bundle's scale.
	if s := r.TransferScale(1); s < 2.6 || s > 2.8 {
		t.Errorf("file 1's transfer scale %.3f, want 2.6-2.8 (3, pooled with 250 µs at the bundle's %.3f)", s, r.Transfer)
	}
	if s := r.TransferScale(2); s < 1.2 || s > 1.35 {
		t.Errorf("file 2's transfer scale %.3f, want 1.2-1.35 (1, pooled)", s)
	}
	if s := r.TransferScale(99); s != r.Transfer || math.Abs(r.Transfer-2) > 0.03 {
		t.Errorf("a file without operations has transfer scale %.3f, want the bundle's %.3f (about 2: 19 reads of file 1 at 3, 20 of file 2 at 1)", s, r.Transfer)
	}
	run := func(rates *FileRates) int64 {
		src, err := in.Source()
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		rep, err := Run(Config{CacheBytes: 1 << 30, Device: d, NoReadahead: true, FileRates: rates}, src)
		if err != nil {
			t.Fatal(err)
		}
		if (rep.FileRates != nil) != (rates != nil) {
			t.Errorf("report's file rates %v, want %v", rep.FileRates, rates)
		}
		return rep.Lane(BaselineName).WallNS
	}
	errOf := func(w int64) float64 { return math.Abs(float64(w-wall)) / float64(wall) }
	without, with := run(nil), run(r)
	t.Logf("recorded wall %.2f ms; predicted %.2f ms without file rates, %.2f ms with", float64(wall)/1e6, float64(without)/1e6, float64(with)/1e6)
	if errOf(with) > 0.03 {
		t.Errorf("with file rates the prediction is %.1f%% off the recorded wall, want within 3%%", 100*errOf(with))
	}
	if errOf(without) < 0.10 {
		t.Errorf("without file rates the prediction is %.1f%% off; the test wants a recording the profile's rates mispredict", 100*errOf(without))
	}
}

// TestFileRatesPrefetch: a prefetch keeps the device's latency and takes
// its file's transfer scale; a demand read takes both scales.
func TestFileRatesPrefetch(t *testing.T) {
	d := Device{Name: "t", LatencyNS: 50_000, BytesPerSec: 4096 / 2e-6, QueueDepth: 32}
	rates := &FileRates{Latency: 1.5, Transfer: 1, byFile: map[uint32]float64{7: 4}}
	s := newDeviceState(d, 4096)
	s.rates = rates
	if got, want := s.submitFor(0, 10, 7), int64(50_000+4*20_000); got != want {
		t.Errorf("prefetch of 10 pages of file 7 done at %d, want %d (latency as is, transfer ×4)", got, want)
	}
	s = newDeviceState(d, 4096)
	s.rates = rates
	if got, want := s.submitSyncFor(0, 10, 7), int64(75_000+4*20_000); got != want {
		t.Errorf("demand read of 10 pages of file 7 done at %d, want %d (latency ×1.5, transfer ×4)", got, want)
	}
	s = newDeviceState(d, 4096)
	s.rates = rates
	if got, want := s.submitSyncFor(0, 10, 8), int64(75_000+20_000); got != want {
		t.Errorf("demand read of 10 pages of file 8 done at %d, want %d (latency ×1.5, the bundle's transfer ×1)", got, want)
	}
}

// TestFileRatesNone: a recording without service times fits nothing.
func TestFileRatesNone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	if err := formats.Synth(dir, formats.SynthSpec{Pattern: "seq", Events: 100, FilePages: 1000}); err != nil {
		t.Fatal(err)
	}
	in, err := OpenInput(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	r, err := FitFileRates(in.Bundle, Device{Name: "t", LatencyNS: 50_000, BytesPerSec: 1e9, QueueDepth: 1}, in.PageSize)
	if err != nil || r != nil {
		t.Fatalf("FitFileRates = %v, %v; want nil, nil", r, err)
	}
}

// FuzzFitRates: any operations and insertions fit scales within their
// bounds, or none, without a panic.
func FuzzFitRates(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23})
	f.Add(make([]byte, 96))
	d := Device{Name: "t", LatencyNS: 50_000, BytesPerSec: 1e9, QueueDepth: 4, Idle: []IdleCost{{GapNS: 1000, ExtraNS: 0}, {GapNS: 1e6, ExtraNS: 50_000}}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ops []fitOp
		var adds []fitAdd
		for len(b) >= 12 {
			ts := int64(b[0])<<16 | int64(b[1])<<8 | int64(b[2])
			span := int64(b[3])<<12 | int64(b[4])
			tid, file := uint32(b[5]&3), uint32(b[6]&7)
			if b[7]&1 == 0 {
				ops = append(ops, fitOp{ts: ts, end: ts + span, tid: tid, file: file})
			} else {
				adds = append(adds, fitAdd{ts: ts, tid: tid, file: file, pages: uint32(b[8])<<8 | uint32(b[9])})
			}
			b = b[12:]
		}
		r := fitRates(ops, adds, d, 4096)
		if r == nil {
			return
		}
		in := func(x float64) bool { return x >= minRateScale && x <= maxRateScale }
		if !in(r.Latency) || !in(r.Transfer) || r.Files > 0 && (!in(r.Min) || !in(r.Max)) {
			t.Fatalf("scales out of bounds: %+v", r)
		}
		for f := range uint32(8) {
			if !in(r.TransferScale(f)) {
				t.Fatalf("file %d's scale %v out of bounds", f, r.TransferScale(f))
			}
		}
	})
}

// TestFileRatesConcurrent: a recording whose threads' cold reads overlap
// (all but one pair here) fits no scales: the few that ran alone are no
// sample of the device.
func TestFileRatesConcurrent(t *testing.T) {
	var rows []formats.Access
	ts, op := uint64(1e9), uint64(0)
	for i := range 40 {
		for tid := uint32(1); tid <= 2; tid++ {
			op++
			start := ts + uint64(tid)*10_000 // the two threads' reads overlap
			if i == 39 && tid == 2 {
				start += 1_000_000 // but the last one
			}
			page := uint64(i*2) + uint64(tid)
			rows = append(rows,
				formats.Access{TS: start + 1000, PID: 1, TID: tid, FileID: 1, FirstPage: page, NPages: 1, Kind: formats.KindCacheAdd},
				formats.Access{TS: start, EndNS: start + 60_000, Op: op, Ret: 4096, PID: 1, TID: tid, FileID: 1, FirstPage: page, NPages: 1, Kind: formats.KindRead})
		}
		ts += 100_000
	}
	files := []formats.File{{ID: 1, Dev: 0xfc00000, Ino: 11, Path: "/f", Size: 4096 * 4096, Mode: 0o100644}}
	b, err := formats.Open(tracetest.ServiceBundle(t, nil, files, rows, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d := Device{Name: "t", LatencyNS: 50_000, BytesPerSec: 1e9, QueueDepth: 32}
	if r, err := FitFileRates(b, d, 4096); err != nil || r != nil {
		t.Errorf("FitFileRates of overlapping reads = %+v, %v; want nil, nil", r, err)
	}
}
