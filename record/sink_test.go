package record

import (
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/source"
)

// TestSinkNoAlloc checks that writing a batch into a real formats.Writer
// allocates nothing per row.
func TestSinkNoAlloc(t *testing.T) {
	fw, err := formats.Create(t.TempDir()+"/b", formats.WithFileResolver(func(id uint32) formats.File {
		return formats.File{ID: id, Path: "/f", Ino: uint64(id) + 1, Mode: formats.ModeRegular}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Abort()
	s := &bundleSink{w: fw}
	b := &source.Batch{Accesses: make([]formats.Access, 4096)}
	for i := range b.Accesses {
		b.Accesses[i] = formats.Access{TS: uint64(i), PID: 1, TID: 1, Comm: "cat", FileID: uint32(i % 2), FirstPage: uint64(i), NPages: 1, Kind: formats.KindRead}
	}
	if err := s.Consume(b); err != nil {
		t.Fatal(err)
	}
	// formats.Writer compresses a batch every 65536 rows; average that in.
	allocs := testing.AllocsPerRun(32, func() {
		if err := s.Consume(b); err != nil {
			t.Fatal(err)
		}
	})
	if perRow := allocs / float64(len(b.Accesses)); perRow > 0.01 {
		t.Errorf("%.3f allocations per row", perRow)
	}
}

// TestResolveWaitsForPath: a file row the source has no path for yet waits
// for it, briefly (the open naming it may come on another ring after the
// batch fills, as it did once in the 6.1 guest's TestENOSPC); a file that
// never gets one costs at most pathWait, and all of them pathWaitTotal.
func TestResolveWaitsForPath(t *testing.T) {
	start := time.Now()
	f := &fileRows{now: func(id uint32) (formats.File, bool) {
		if id == 1 && time.Since(start) > 20*time.Millisecond {
			return formats.File{ID: id, Path: "/late"}, true
		}
		return formats.File{ID: id}, true
	}}
	if row := f.resolve(1); row.Path != "/late" {
		t.Errorf("row %+v, want the path that came 20 ms later", row)
	}
	t0 := time.Now()
	if row := f.resolve(2); row.Path != "" {
		t.Errorf("row %+v", row)
	}
	if d := time.Since(t0); d < pathWait/2 {
		t.Errorf("gave up on a path after %v, want about %v", d, pathWait)
	}
	for id := uint32(3); id < 30; id++ {
		f.resolve(id)
	}
	if f.waited > pathWaitTotal+50*time.Millisecond {
		t.Errorf("waited %v in all, want at most about %v", f.waited, pathWaitTotal)
	}
	if _, unresolved := f.written(); unresolved != 28 {
		t.Errorf("%d rows without a path, want 28", unresolved)
	}
}
