package trace

import (
	"path/filepath"
	"testing"

	"github.com/predictio/predictio/formats"
)

// BenchmarkInfo measures trace info's streaming pass over a 1 M-event
// sequential bundle; it reports events/s.
func BenchmarkInfo(b *testing.B) {
	const n = 1 << 20
	dir := filepath.Join(b.TempDir(), "b")
	w, err := formats.Create(dir)
	if err != nil {
		b.Fatal(err)
	}
	for f := uint32(0); f < 16; f++ {
		w.AddFile(formats.File{ID: f, Ino: uint64(f + 1), Path: "/f"})
	}
	a := formats.Access{PID: 1, TID: 1, Comm: "bench", NPages: 1, Kind: formats.KindRead}
	for i := 0; i < n; i++ {
		a.TS, a.FileID, a.FirstPage = uint64(i)*1000, uint32(i>>16), uint64(i&0xffff)
		if err := w.Append(&a); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := Info(dir, 10)
		if err != nil {
			b.Fatal(err)
		}
		if s.Events != n {
			b.Fatalf("%d events", s.Events)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
