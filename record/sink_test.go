package record

import (
	"testing"

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
