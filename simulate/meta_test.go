package simulate

import (
	"slices"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// TestMetaReads: cache_add rows of a block device are the filesystem
// metadata the program's lookups read: with Config.BlockFiles, 32 of
// adjacent blocks added one after another are one device request, which
// holds the device while the program's next data read waits behind it;
// without it they are not modelled.
func TestMetaReads(t *testing.T) {
	const dev = 9
	var evs []policies.Event
	ts := uint64(1e9)
	for b := range uint64(32) { // an inode table read ahead
		evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: dev,
			Access: policies.FileAccess{Kind: formats.KindCacheAdd, Page: 5000 + b, NPages: 1}})
		ts += 500
	}
	ts += 1000
	evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: 1,
		Access: policies.FileAccess{Kind: formats.KindRead, Page: 0, NPages: 1, End: ts + 100_000, Op: 1}})
	// 20 µs a request, 1 ms a page of transfer: the metadata request holds
	// the device for 32 ms.
	d := Device{Name: "slow", LatencyNS: 20_000, BytesPerSec: 4096e3, QueueDepth: 32}
	run := func(block map[uint32]bool) Stats {
		r, err := Run(Config{CacheBytes: 1 << 30, Device: d, NoReadahead: true, BlockFiles: block}, &SliceSource{Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		return *r.Lane(BaselineName)
	}
	without, with := run(nil), run(map[uint32]bool{dev: true})
	if without.MetaPagesRead != 0 || with.MetaPagesRead != 32 || with.MetaRequests != 1 {
		t.Errorf("metadata pages read %d without BlockFiles, %d in %d requests with; want 0, and 32 in 1", without.MetaPagesRead, with.MetaPagesRead, with.MetaRequests)
	}
	if with.StallNS < without.StallNS+20_000_000 {
		t.Errorf("the data read stalled %d ns after the metadata request, %d ns without it; want about 30 ms more", with.StallNS, without.StallNS)
	}
	if with.PagesRead != without.PagesRead || with.Misses != 1 {
		t.Errorf("pages read %d with, %d without, misses %d: metadata blocks are not the program's pages", with.PagesRead, without.PagesRead, with.Misses)
	}
}

// TestWallFromFirstIssued: the wall starts at the program's first issued
// operation, as replay's and the manifest's recorded wall do, not at a
// metadata block or an exec row that came 90 ms before it.
func TestWallFromFirstIssued(t *testing.T) {
	const dev, ms = 9, uint64(1e6)
	t0 := uint64(1e9)
	ev := func(ts uint64, file uint32, a policies.FileAccess) policies.Event {
		return policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: file, Access: a}
	}
	evs := []policies.Event{
		ev(t0, dev, policies.FileAccess{Kind: formats.KindCacheAdd, Page: 5000, NPages: 1}),
		ev(t0+ms, 1, policies.FileAccess{Kind: formats.KindExec}),
		ev(t0+90*ms, 1, policies.FileAccess{Kind: formats.KindRead, Page: 0, NPages: 1, End: t0 + 91*ms, Op: 1}),
		ev(t0+92*ms, 1, policies.FileAccess{Kind: formats.KindRead, Page: 1, NPages: 1, End: t0 + 93*ms, Op: 2}),
	}
	d := Device{Name: "d", LatencyNS: 100_000, BytesPerSec: 4096e6, QueueDepth: 32}
	r, err := Run(Config{CacheBytes: 1 << 30, Device: d, NoReadahead: true, BlockFiles: map[uint32]bool{dev: true}}, &SliceSource{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	// Two misses of about 100 µs and 1 ms of think between them.
	if w := r.Lane(BaselineName).WallNS; w < int64(ms) || w > int64(2*ms) {
		t.Errorf("wall %d ns, want about 1.2 ms: from the first read, not the block or the exec 90 ms before", w)
	}
}

// TestMetaInsideOps: with a host model, the blocks a stat read inside its
// recorded span are its own reads: it takes its recorded time before the
// first block, the model's device reads of the blocks one after another,
// and at most Host.OpenNS after the last, not its recorded 40 ms (a
// recording on a slow moment of the disk); without a host model, or for
// blocks outside its span, the recorded service stands and the blocks go
// to the device in the background.
func TestMetaInsideOps(t *testing.T) {
	const dev, ms = 9, int64(1e6)
	t0 := uint64(1e9)
	ev := func(ts uint64, file uint32, a policies.FileAccess) policies.Event {
		return policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: file, Access: a}
	}
	block := func(ts, page uint64) policies.Event {
		return ev(ts, dev, policies.FileAccess{Kind: formats.KindCacheAdd, Page: page, NPages: 1})
	}
	stat := func(ts, end uint64) policies.Event {
		return ev(ts, 1, policies.FileAccess{Kind: formats.KindStat, End: end, Op: ts})
	}
	read := ev(t0, 1, policies.FileAccess{Kind: formats.KindRead, Page: 0, NPages: 1, End: t0 + 1000, Op: 1})
	// A stat of 40 ms that read two blocks 10 µs and 20 ms into it.
	inside := []policies.Event{read, block(t0+1_010_000, 100), block(t0+21_000_000, 900), stat(t0+1_000_000, t0+41_000_000)}
	// The same blocks read before the stat's span: not its own.
	outside := []policies.Event{read, block(t0+500_000, 100), block(t0+600_000, 900), stat(t0+1_000_000, t0+41_000_000)}
	d := Device{Name: "d", LatencyNS: 100_000, BytesPerSec: 4096e6, QueueDepth: 32, QueueLatencyNS: slices.Repeat([]int64{100_000}, 32)}
	run := func(evs []policies.Event, host bool) Stats {
		dd := d
		if host {
			dd.Host = testHost()
		}
		r, err := Run(Config{CacheBytes: 1 << 30, Device: dd, NoReadahead: true, PerKind: true, BlockFiles: map[uint32]bool{dev: true}}, &SliceSource{Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		return *r.Lane(BaselineName)
	}
	statNS := func(s Stats) int64 {
		for _, k := range s.Kinds {
			if k.Kind == "stat" {
				return k.ServiceNS
			}
		}
		return -1
	}
	st := run(inside, true)
	// 10 µs, two reads of about 100 µs, at most OpenNS after.
	if got := statNS(st); got < 200_000 || got > 230_000+testHost().OpenNS {
		t.Errorf("stat holding two blocks: %d ns, want about 210 µs (10 µs before, two 100 µs reads)", got)
	}
	if st.MetaSyncRequests != 2 || st.MetaRequests != 2 || st.MetaPagesRead != 2 {
		t.Errorf("metadata requests %d (%d waited for), pages %d; want 2 (2), 2", st.MetaRequests, st.MetaSyncRequests, st.MetaPagesRead)
	}
	for name, s := range map[string]Stats{"no host model": run(inside, false), "blocks before its span": run(outside, true)} {
		if got := statNS(s); got != 40*ms {
			t.Errorf("%s: stat %d ns, want its recorded 40 ms", name, got)
		}
		if s.MetaSyncRequests != 0 || s.MetaRequests != 2 {
			t.Errorf("%s: metadata requests %d (%d waited for), want 2 (0)", name, s.MetaRequests, s.MetaSyncRequests)
		}
	}
}

// TestMetaOrphansDoNotWait: a thread whose blocks no operation of its own
// ever holds (its lookups were of files the bundle leaves out) does not
// leave them waiting: once another thread's rows are metaHold past them,
// they go to the device, and the runs waiting stay few however many
// such blocks come.
func TestMetaOrphansDoNotWait(t *testing.T) {
	const dev = 9
	s, err := New(Config{CacheBytes: 1 << 30, Device: Device{Name: "d", LatencyNS: 100_000, BytesPerSec: 4096e6, QueueDepth: 32},
		NoReadahead: true, BlockFiles: map[uint32]bool{dev: true}})
	if err != nil {
		t.Fatal(err)
	}
	ts := uint64(1e9)
	for i := range uint64(2000) {
		// Thread 2 reads a block every ms (never adjacent: a run each);
		// thread 1 reads a page 10 µs later.
		for _, ev := range []policies.Event{
			{Kind: policies.EventFileAccess, TS: ts, PID: 2, TID: 2, File: dev, Access: policies.FileAccess{Kind: formats.KindCacheAdd, Page: 2 * i, NPages: 1}},
			{Kind: policies.EventFileAccess, TS: ts + 10_000, PID: 1, TID: 1, File: 1, Access: policies.FileAccess{Kind: formats.KindRead, Page: i, NPages: 1, End: ts + 20_000, Op: i + 1}},
		} {
			if err := s.Step(&ev); err != nil {
				t.Fatal(err)
			}
		}
		ts += 1_000_000
	}
	for _, l := range s.lanes {
		if n := len(l.metaPend); n > 101 {
			t.Errorf("lane %s: %d runs waiting after 2 s of one block a ms, want at most the last 100 ms's", l.name, n)
		}
		if l.st.MetaRequests < 1899 {
			t.Errorf("lane %s: %d metadata requests submitted, want those older than 100 ms", l.name, l.st.MetaRequests)
		}
	}
}
