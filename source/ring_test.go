package source

import (
	"fmt"
	"strings"
	"testing"

	"github.com/predictio/predictio/bpf"
)

func TestEventLayout(t *testing.T) {
	if eventSize != 112 {
		t.Fatalf("struct event is %d bytes, want 112 (bpf/record.h)", eventSize)
	}
}

// TestQueryEvery checks queryEvery (the loader's wake_window) matches
// QUERY_EVERY in bpf/record.h, which bpf2go does not export.
func TestQueryEvery(t *testing.T) {
	if want := fmt.Sprintf("#define QUERY_EVERY %d\n", queryEvery); !strings.Contains(bpf.RecordHeader, want) {
		t.Fatalf("bpf/record.h lacks %q (source/ring.go queryEvery)", want)
	}
}

// TestDecodeNoAlloc checks the per-event decode path allocates nothing
// once files and comms are known.
func TestDecodeNoAlloc(t *testing.T) {
	s := testSource()
	s.opensMark.Store(^uint64(0))
	for i := range 2 {
		s.files.add(fileKey{dev: 1, ino: uint64(i + 1)}, 0, "/f")
	}
	d := newDecoder(s)
	b := new(rawBatch)
	for i := range batchLen {
		b.ev[i] = bpf.RecordEvent{Ts: uint64(i), Ino: uint64(i%2 + 1), Dev: 1, Index: uint64(i), Npages: 1, Kind: 1}
		copy(b.ev[i].Comm[:], []int8{'c', 'a', 't'})
	}
	b.n = batchLen
	d.run(b)
	allocs := testing.AllocsPerRun(32, func() { d.run(b) })
	if perEvent := allocs / batchLen; perEvent > 0.001 {
		t.Errorf("%.4f allocations per event", perEvent)
	}
	if len(d.rows) != batchLen || d.rows[5].FileID != 2 || d.rows[5].Comm != "cat" || d.rows[5].FirstPage != 5 {
		t.Errorf("decoded %d rows, row 5 %+v", len(d.rows), d.rows[5])
	}
}
