package policies

import (
	"slices"
	"testing"

	"github.com/predictio/predictio/formats"
)

// rocksReads feeds 1-page reads of file 1 by thread tid and returns the
// requested ranges, one slice per read (nil when the read emitted none).
func rocksReads(t *testing.T, p Policy, tid uint32, pages ...uint64) [][]Range {
	t.Helper()
	var out [][]Range
	for _, pg := range pages {
		var got []Range
		ev := Event{Kind: EventFileAccess, File: 1, TID: tid, Access: FileAccess{Kind: formats.KindRead, Page: pg, NPages: 1}}
		p.Handle(&ev, func(r *Request) { got = append(got, r.Ranges...) })
		out = append(out, got)
	}
	return out
}

func buildRocks(t *testing.T, spec string) Policy {
	t.Helper()
	p, err := Build(spec, Env{FilePages: func(uint32) uint64 { return 1 << 20 }, MaxPages: 1024})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRocksDBSequential follows RocksDB's state machine on a sequential
// scan: nothing for the first two reads, then the block plus an 8 KiB
// window, doubling on each read past the last window, capped at 256 KiB.
func TestRocksDBSequential(t *testing.T) {
	p := buildRocks(t, "rocksdb")
	pages := make([]uint64, 400)
	for i := range pages {
		pages[i] = uint64(i)
	}
	got := rocksReads(t, p, 7, pages...)
	var reqs []Range
	for i, g := range got {
		if i < 2 && g != nil {
			t.Fatalf("read %d: prefetched %v before num_file_reads_for_auto_readahead sequential reads", i, g)
		}
		reqs = append(reqs, g...)
	}
	want := []Range{{2, 3}, {5, 5}, {10, 9}, {19, 17}, {36, 33}, {69, 65}, {134, 65}, {199, 65}, {264, 65}, {329, 65}, {394, 65}}
	if !slices.Equal(reqs, want) {
		t.Fatalf("requests %v, want %v", reqs, want)
	}
}

// TestRocksDBJumpResets checks ResetValues: after a jump the window is
// back at its initial size once two more sequential reads are seen.
func TestRocksDBJumpResets(t *testing.T) {
	p := buildRocks(t, "rocksdb")
	rocksReads(t, p, 1, 0, 1, 2, 3, 4, 5) // windows grown to 32 KiB
	got := rocksReads(t, p, 1, 1000, 1001, 1002)
	if got[0] != nil || got[1] != nil {
		t.Fatalf("prefetched right after a jump: %v", got)
	}
	if want := []Range{{1002, 3}}; !slices.Equal(got[2], want) {
		t.Fatalf("after the jump: %v, want %v (initial window again)", got[2], want)
	}
}

// TestRocksDBSelective: point reads (YCSB-C) never prefetch, and
// max_kb=0 turns the policy off as max_auto_readahead_size=0 does.
func TestRocksDBSelective(t *testing.T) {
	p := buildRocks(t, "rocksdb")
	for i, g := range rocksReads(t, p, 1, 500, 20, 9000, 77, 4000, 123456, 3) {
		if g != nil {
			t.Fatalf("random read %d prefetched %v", i, g)
		}
	}
	off := buildRocks(t, "rocksdb:max_kb=0")
	for i, g := range rocksReads(t, off, 1, 0, 1, 2, 3, 4, 5, 6, 7) {
		if g != nil {
			t.Fatalf("max_kb=0: read %d prefetched %v", i, g)
		}
	}
}

// TestRocksDBThreads: two iterators scanning the same file in turns keep
// their own state, as RocksDB's per-iterator prefetchers do.
func TestRocksDBThreads(t *testing.T) {
	p := buildRocks(t, "rocksdb")
	var n int
	for i := uint64(0); i < 20; i++ {
		n += len(rocksReads(t, p, 1, i)[0])
		n += len(rocksReads(t, p, 2, 5000+i)[0])
	}
	if n < 4 {
		t.Fatalf("interleaved sequential threads gave %d requests, want windows for both", n)
	}
}
