package record

import (
	"testing"

	"github.com/predictio/predictio/bpf"
	"github.com/predictio/predictio/formats"
)

func TestEventLayout(t *testing.T) {
	if eventSize != 64 {
		t.Fatalf("struct event is %d bytes, want 64 (bpf/record.h)", eventSize)
	}
}

// TestWriteBatchNoAlloc checks the per-event write path allocates nothing
// once files and comms are known, including into a real formats.Writer.
func TestWriteBatchNoAlloc(t *testing.T) {
	fw, err := formats.Create(t.TempDir() + "/b")
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Abort()
	// The file rows of the two files below (the recorder's resolver gives
	// them when the first batch is written).
	for id := range uint32(2) {
		fw.AddFile(formats.File{ID: id, Dev: 1, Ino: uint64(id + 1), Path: "/f"})
	}
	for _, out := range []bundleWriter{&memSink{}, fw} {
		r := &recorder{out: out, files: newFileTable(filter{}, nil, "")}
		r.opensMark.Store(^uint64(0))
		for i := range 2 {
			r.files.add(fileKey{dev: 1, ino: uint64(i + 1)}, 0, "/f")
		}
		w := newWriter(r)
		b := new(batch)
		for i := range batchLen {
			b.ev[i] = bpf.RecordEvent{Ts: uint64(i), Ino: uint64(i%2 + 1), Dev: 1, Index: uint64(i), Npages: 1, Kind: 1}
			copy(b.ev[i].Comm[:], []int8{'c', 'a', 't'})
		}
		b.n = batchLen
		w.writeBatch(b)
		// formats.Writer compresses a batch every 65536 rows; average that in.
		allocs := testing.AllocsPerRun(32, func() { w.writeBatch(b) })
		if perEvent := allocs / batchLen; perEvent > 0.01 {
			t.Errorf("%T: %.3f allocations per event", out, perEvent)
		}
		if r.writeErr.Load() != nil {
			t.Fatal(*r.writeErr.Load())
		}
	}
}
