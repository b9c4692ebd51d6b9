package simulate

import (
	"fmt"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// treeWalk returns a walk of dirs directories of files one-page files
// each, as grep -r does it: each directory read (50 µs, its blocks from
// the device), then each file opened (4 µs), read (1 µs) and 20 µs of
// think time; and the files' paths. Directory d is file 1000+d; file f of
// it is d*100+f+1.
func treeWalk(dirs, files int) ([]policies.Event, []DirFile) {
	var evs []policies.Event
	var fs []DirFile
	ts, op := uint64(1e9), uint64(0)
	row := func(file uint32, k formats.AccessKind, svc uint64) {
		op++
		evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 1, TID: 1, File: file,
			Access: policies.FileAccess{Kind: k, NPages: 1, End: ts + svc, Op: op}})
		ts += svc + 20_000
	}
	for d := range dirs {
		dir := uint32(1000 + d)
		fs = append(fs, DirFile{ID: dir, Path: fmt.Sprintf("/t/d%d", d), Size: 4096})
		row(dir, formats.KindReaddir, 50_000)
		for f := range files {
			id := uint32(d*100 + f + 1)
			fs = append(fs, DirFile{ID: id, Path: fmt.Sprintf("/t/d%d/f%d", d, f), Size: 4096})
			row(id, formats.KindOpen, 4_000)
			row(id, formats.KindRead, 1_000)
		}
	}
	return evs, fs
}

// TestHostDirReads: with Config.Dirs, the backend's open of a file in a
// directory the program has not read yet waits for that directory's block
// from the device, once per directory, and the program's later read of
// that directory (one block) costs no more than a cached open. The
// baseline, which has no backend, is the same either way.
func TestHostDirReads(t *testing.T) {
	const dirs, files = 20, 10
	evs, fs := treeWalk(dirs, files)
	h := testHost()
	h.OpenNS = 5_000
	without := runHost(t, h, evs, nil)
	with := runHost(t, h, evs, func(c *Config) { c.Dirs = NewDirs(fs, 4096) })
	wo, wi := without.Lane("oracle"), with.Lane("oracle")
	if wo.BackendDirReads != 0 {
		t.Errorf("without Dirs the backend read %d directory blocks, want none modelled", wo.BackendDirReads)
	}
	// The oracle runs ahead into directories the program reaches later:
	// every directory but the first few, at most once each.
	if wi.BackendDirReads < dirs/2 || wi.BackendDirReads > dirs {
		t.Errorf("with Dirs the backend read %d directory blocks, want one for each of most of the %d directories", wi.BackendDirReads, dirs)
	}
	if d := wi.BackendOpenNS - wo.BackendOpenNS; d < int64(wi.BackendDirReads)*20_000 {
		t.Errorf("the directory reads added %d ns to the backend's opens, want at least %d × the device's 20 µs", d, wi.BackendDirReads)
	}
	// The program's reads of the directories the backend cached first
	// took 5 µs instead of 50.
	if wi.WallNS >= wo.WallNS {
		t.Errorf("oracle wall %d ns with Dirs, %d without: the cached directories' reads should be shorter", wi.WallNS, wo.WallNS)
	}
	if b1, b2 := without.Lane(BaselineName), with.Lane(BaselineName); b1.WallNS != b2.WallNS {
		t.Errorf("baseline wall %d ns without Dirs, %d with: it has no backend", b1.WallNS, b2.WallNS)
	}
}

// TestHostDirWaits: a backend open in a directory whose read the program
// has begun but not finished waits for that read, and reads nothing
// itself.
func TestHostDirWaits(t *testing.T) {
	l := &lane{host: testHost(), dev: newDeviceState(Device{Name: "20us", LatencyNS: 20_000, BytesPerSec: 4096e9, QueueDepth: 32}, 4096)}
	l.paths.warm = map[uint32]int64{}
	l.paths.initDirs(NewDirs([]DirFile{{ID: 7, Path: "/t/d", Size: 4096}, {ID: 8, Path: "/t/d/f", Size: 100}}, 4096))
	l.host.OpenNS = 5_000
	if svc := l.lookup(7, formats.KindReaddir, 1_000_000, 50_000); svc != 50_000 {
		t.Fatalf("a cold directory's read took %d ns, want its recorded 50 µs", svc)
	}
	if c := l.openCost(8, 1_010_000, 2); c != 40_000+10_000 || l.st.BackendDirReads != 0 {
		t.Errorf("an open 10 µs into the directory's read, with the program on the CPUs (x2), cost %d ns and %d device reads; want the 40 µs left, 2 x 5 µs, and none", c, l.st.BackendDirReads)
	}
	if c := l.openCost(8, 2_000_000, 1.5); c != 7_500 {
		t.Errorf("a warm open with the program on the CPUs (x1.5) cost %d ns, want 7.5 µs", c)
	}
	if svc := l.lookup(7, formats.KindReaddir, 2_000_000, 50_000); svc != 5_000 {
		t.Errorf("a cached small directory's read took %d ns, want the cached open's 5 µs", svc)
	}
}

func TestNewDirs(t *testing.T) {
	d := NewDirs([]DirFile{{ID: 1, Path: "/a/b/c", Size: 10}, {ID: 2, Path: "/a/b", Size: 3 * 4096}, {ID: 3, Path: "/a/x"}, {ID: 4}}, 4096)
	if d.parentOf(1) != d.selfOf(2) || d.parentOf(1) < 0 {
		t.Errorf("the directory of /a/b/c is %d, /a/b's own index %d", d.parentOf(1), d.selfOf(2))
	}
	if d.parentOf(3) != d.parentOf(2) || d.parentOf(4) != -1 || d.selfOf(4) != -1 {
		t.Errorf("parents %d %d (want equal), a file without a path %d %d (want -1)", d.parentOf(3), d.parentOf(2), d.parentOf(4), d.selfOf(4))
	}
	if d.lookupReads(d.selfOf(2)) != 2 || d.small(d.selfOf(2)) || d.lookupReads(d.parentOf(2)) != 1 || d.small(d.parentOf(2)) {
		t.Errorf("/a/b (3 blocks): %d reads, small %v; /a (size unknown): %d reads, small %v", d.lookupReads(d.selfOf(2)), d.small(d.selfOf(2)), d.lookupReads(d.parentOf(2)), d.small(d.parentOf(2)))
	}
}
