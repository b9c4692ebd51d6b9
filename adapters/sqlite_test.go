package adapters

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/adapters")

func TestSQLiteLocal(t *testing.T) {
	// 4 KiB pages, no reserved bytes: X = 4061 (table leaf) and 1002
	// (index), M = 489, U-4 = 4092.
	for _, c := range []struct {
		p, want   uint64
		tableLeaf bool
	}{
		{1000, 1000, true},
		{4061, 4061, true},
		{4062, 489, true},       // K = 489 + 3573 = 4062 > X
		{4092 + 489, 489, true}, // K = 489 + 0 = 489
		{1002, 1002, false},
		{1003, 489, false}, // K = 489 + 514 = 1003 > 1002
		{1024 + 20, 489, false},
		{4092 + 600, 600, false}, // K = 489 + 111 = 600 <= 1002
	} {
		if got := sqliteLocal(4096, c.p, c.tableLeaf); got != c.want {
			t.Errorf("sqliteLocal(4096, %d, tableLeaf=%v) = %d, want %d", c.p, c.tableLeaf, got, c.want)
		}
	}
}

func TestSQLiteVarint(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		v    uint64
		size int
	}{
		{[]byte{0x05}, 5, 1},
		{[]byte{0x81, 0x00}, 128, 2},
		{[]byte{0x87, 0x68}, 1000, 2},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1<<64 - 1, 9},
		{[]byte{0x81}, 0, 0}, // truncated
		{nil, 0, 0},
	} {
		v, n := sqliteVarint(c.b)
		if v != c.v || n != c.size {
			t.Errorf("sqliteVarint(%x) = %d, %d; want %d, %d", c.b, v, n, c.v, c.size)
		}
	}
}

func TestSQLiteHeaderErrors(t *testing.T) {
	good := func() []byte {
		h := make([]byte, 100)
		copy(h, sqliteMagic)
		binary.BigEndian.PutUint16(h[16:], 4096)
		h[18], h[19], h[21], h[22], h[23] = 1, 1, 64, 32, 32
		return h
	}
	if _, ok, err := parseSQLiteHeader(good()); !ok || err != nil {
		t.Fatalf("good header: ok %v err %v", ok, err)
	}
	for _, c := range []struct {
		name string
		edit func([]byte)
		want string
	}{
		{"page size 1000", func(h []byte) { binary.BigEndian.PutUint16(h[16:], 1000) }, "page size (offset 16)"},
		{"page size 256", func(h []byte) { binary.BigEndian.PutUint16(h[16:], 256) }, "page size (offset 16)"},
		{"reserved", func(h []byte) { h[20] = 255; binary.BigEndian.PutUint16(h[16:], 512) }, "reserved bytes (offset 20)"},
		{"fractions", func(h []byte) { h[21] = 63 }, "payload fractions"},
	} {
		h := good()
		c.edit(h)
		_, ok, err := parseSQLiteHeader(h)
		if !ok || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ok %v err %v, want an error naming %q", c.name, ok, err, c.want)
		}
	}
	if _, ok, _ := parseSQLiteHeader([]byte("SQLite format 2\x00")); ok {
		t.Error("a short or foreign header was recognized")
	}
	h := good()
	binary.BigEndian.PutUint16(h[16:], 1)
	if g, _, err := parseSQLiteHeader(h); err != nil || g.pageSize != 65536 {
		t.Errorf("page size field 1 = %d, %v; want 65536", g.pageSize, err)
	}
}

// dbstatEntry is one row of a .dbstat file.
type dbstatEntry struct {
	name, path, typ string
	page            uint32
	ncell           int // -1 when the file has no cell counts
}

func readDbstat(t *testing.T, name string) []dbstatEntry {
	t.Helper()
	var out []dbstatEntry
	for _, f := range readFields(t, name) {
		if len(f) != 4 && len(f) != 5 {
			t.Fatalf("%s: line %v", name, f)
		}
		p, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		n := -1
		if len(f) == 5 {
			if n, err = strconv.Atoi(f[4]); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, dbstatEntry{name: f[0], path: f[1], page: uint32(p), typ: f[3], ncell: n})
	}
	return out
}

// dbstatLists returns, for each B-tree page, its traversal list as SQLite's
// dbstat reports the structure: children (path P+"%03x/") and the first
// overflow page of each cell (P+"%03x+000000"), in key order, a cell's
// overflow after the child left of it.
func dbstatLists(es []dbstatEntry) map[uint32][]uint32 {
	byPath := map[string]dbstatEntry{}
	for _, e := range es {
		byPath[e.name+e.path] = e
	}
	type item struct {
		idx  int
		ovf  bool
		page uint32
	}
	items := map[uint32][]item{}
	for _, e := range es {
		if e.path == "/" {
			continue
		}
		p := strings.TrimSuffix(e.path, "/")
		var parentPath, rest string
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			parentPath, rest = p[:i+1], p[i+1:]
		}
		ovf := false
		if i := strings.IndexByte(rest, '+'); i >= 0 {
			if rest[i+1:] != "000000" {
				continue // a later page of a chain
			}
			rest, ovf = rest[:i], true
		}
		idx, err := strconv.ParseInt(rest, 16, 32)
		if err != nil {
			continue
		}
		parent, ok := byPath[e.name+parentPath]
		if !ok {
			continue
		}
		items[parent.page] = append(items[parent.page], item{int(idx), ovf, e.page})
	}
	out := map[uint32][]uint32{}
	for p, its := range items {
		sort.Slice(its, func(a, b int) bool {
			if its[a].idx != its[b].idx {
				return its[a].idx < its[b].idx
			}
			return !its[a].ovf && its[b].ovf
		})
		for _, it := range its {
			out[p] = append(out[p], it.page)
		}
	}
	return out
}

// TestSQLiteListsMatchDbstat checks every B-tree page's traversal list,
// children and overflow chains in key order, against the structure SQLite
// itself reports, for 1, 4 and 64 KiB pages and both kinds of B-tree.
func TestSQLiteListsMatchDbstat(t *testing.T) {
	for _, db := range []string{"without-rowid", "rowid", "without-rowid-1k", "without-rowid-64k"} {
		t.Run(db, func(t *testing.T) {
			path := gunzip(t, "sqlite/"+db+".db.gz", "x.db")
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			es := readDbstat(t, "sqlite/"+db+".dbstat")
			want := dbstatLists(es)
			p, err := newSQLite(raw[:100], uint64(len(raw)), &Config{Ahead: 16, PageSize: 4096, Confirm: 2})
			if err != nil {
				t.Fatal(err)
			}
			f := p.(*sqliteFile)
			var st Stats
			checked, overflow := 0, 0
			for _, e := range es {
				if e.typ != "internal" && e.typ != "leaf" {
					continue
				}
				off := int(e.page-1) * int(f.pageSize)
				h := 0
				if e.page == 1 {
					h = 100
				}
				kids, _, ok := f.cells(raw[off:off+int(f.usable)], h, e.page, &st)
				if !ok {
					t.Fatalf("page %d (%s %s) is not a B-tree page to the adapter", e.page, e.path, e.typ)
				}
				got := make([]uint32, len(kids))
				for i, k := range kids {
					got[i] = k.page
					if k.kind == kindOverflow {
						overflow++
					}
				}
				if !slices.Equal(got, want[e.page]) {
					t.Fatalf("page %d (%s %s): list %v, dbstat %v", e.page, e.path, e.typ, got, want[e.page])
				}
				checked++
			}
			if st.Malformed != 0 {
				t.Errorf("%d cells rejected in a valid database", st.Malformed)
			}
			t.Logf("%d B-tree pages, %d overflow chains", checked, overflow)
			if checked < 5 {
				t.Fatalf("only %d pages checked", checked)
			}
			if db == "without-rowid" && overflow < 600 {
				t.Errorf("%d overflow chains; every one of the 600 rows of 1 KiB overflows in an index B-tree", overflow)
			}
		})
	}
}

// scanCase is a recorded range scan of a testdata database.
type scanCase struct {
	db, reads string
	// minInTime is the fraction of the distinct pages read that must have
	// been predicted before they were read.
	minInTime float64
	desc      bool // the scan runs in descending key order
}

var sqliteScans = []scanCase{
	{"without-rowid", "without-rowid-key", 0.75, false},
	{"without-rowid", "without-rowid-desc", 0.75, true},
	{"rowid", "rowid-rowid", 0.95, false},
	{"rowid", "rowid-key", 0.85, false},
	{"without-rowid-64k", "without-rowid-64k-key", 0.1, false},
	{"without-rowid-1k", "without-rowid-1k-key", 0.5, false},
}

// TestSQLiteScans runs the adapter on the preads of real range scans by
// the sqlite3 shell and checks what it predicted: the events match the
// golden file; once the adapter has predicted a page in time (within the
// scan's first 24 reads: the descent and the first steps), every page the
// scan read that it did not predict in time is either one no prediction
// can beat, read right after the page that names it (the first entry in
// scan order of the B-tree page read just before, or the next page of the
// overflow chain read just before), or one of the Confirm+1 entries of a
// node that establish a scan there; and the pages predicted but never read
// are bounded.
func TestSQLiteScans(t *testing.T) {
	for _, c := range sqliteScans {
		t.Run(c.reads, func(t *testing.T) {
			path := gunzip(t, "sqlite/"+c.db+".db.gz", "x.db")
			spans := readSpans(t, "sqlite/"+c.reads+".reads")
			evs := readEvents(spans)
			out, st := run(t, Config{}, path, evs)
			golden(t, "sqlite/"+c.reads+".golden", out)

			es := readDbstat(t, "sqlite/"+c.db+".dbstat")
			lists := dbstatLists(es)
			ps := uint64(pageSizeOf(t, path))
			entry := map[uint32]dbstatEntry{}
			for _, e := range es {
				entry[e.page] = e
			}
			pageOf := func(i int) uint32 { return uint32(spans[i].off/ps) + 1 }
			osPage := func(p uint32) uint64 { return uint64(p-1) * ps / DefaultPageSize }
			r := analyse(evs, out)
			// The list each page is in, and its position there.
			parent := map[uint32]uint32{}
			for p, l := range lists {
				for _, k := range l {
					parent[k] = p
				}
			}
			// Before the first page predicted in time the scan descends
			// and confirms; that takes a bounded number of reads.
			if r.firstInTime < 0 || r.firstInTime > 24 {
				t.Fatalf("first page predicted in time at read %d, want within the first 24", r.firstInTime)
			}
			entered := map[uint32]map[uint32]bool{} // node -> its entries read so far
			missed := map[int]bool{}
			for _, i := range r.missed {
				missed[i] = true
			}
			for i := range spans {
				page := entry[pageOf(i)]
				p, listed := parent[page.page]
				if listed {
					if entered[p] == nil {
						entered[p] = map[uint32]bool{}
					}
					entered[p][page.page] = true
				}
				if !missed[i] || i < r.firstInTime {
					continue
				}
				prev := entry[pageOf(i-1)]
				l := lists[prev.page]
				first := uint32(0)
				if len(l) > 0 {
					first = l[0]
					if c.desc {
						first = l[len(l)-1]
					}
				}
				switch {
				case len(l) > 0 && osPage(first) == osPage(page.page):
					// (a) the first entry of the page just read
				case chainNext(prev.path, page.path):
					// (b) the next page of the chain just read
				case listed && len(entered[p]) <= DefaultConfirm+1:
					// (c) one of the entries that confirm a scan in its node
				default:
					t.Errorf("read %d of page %d (%s %s) was not predicted, and is neither the first entry of page %d (%s) read before it, nor its chain's next page, nor one of the first %d entries of its node read",
						i, page.page, page.typ, page.path, prev.page, prev.path, DefaultConfirm+1)
				}
			}
			inTime := float64(r.inTime) / float64(r.distinct)
			t.Logf("%d reads, %d distinct pages, %.3f predicted in time, %d predicted never read, %d events, stats %+v",
				len(evs), r.distinct, inTime, r.never, len(out), st.Stats())
			if inTime < c.minInTime {
				t.Errorf("%.3f of the pages read were predicted in time, want at least %.2f", inTime, c.minInTime)
			}
			// Never-read predictions come from the windows ahead of the
			// scan's end: at most Ahead entries a level (three levels
			// here) plus the overflow chains of the first leaf's cells
			// before the scan's start, each expanded to its OS pages.
			bound := (3*DefaultAhead + 64) * int(max(ps/DefaultPageSize, 1))
			if r.never > bound {
				t.Errorf("%d pages predicted but never read, want at most %d", r.never, bound)
			}
			if st.Stats().PagesIO != 0 {
				t.Errorf("the adapter read %d pages the program had not just read", st.Stats().PagesIO)
			}
		})
	}
}

// chainNext reports whether dbstat path b is the overflow page after a in
// one chain ("P+00000j" after "P+00000i" with j = i+1).
func chainNext(a, b string) bool {
	ai, bi := strings.LastIndexByte(a, '+'), strings.LastIndexByte(b, '+')
	if ai < 0 || bi < 0 || a[:ai] != b[:bi] {
		return false
	}
	x, err1 := strconv.ParseUint(a[ai+1:], 16, 32)
	y, err2 := strconv.ParseUint(b[bi+1:], 16, 32)
	return err1 == nil && err2 == nil && y == x+1
}

func pageSizeOf(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := make([]byte, 100)
	if _, err := f.ReadAt(h, 0); err != nil {
		t.Fatal(err)
	}
	g, _, err := parseSQLiteHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	return int(g.pageSize)
}

// analysis compares what a scan read with what was predicted.
type analysis struct {
	distinct, inTime, never int
	firstInTime             int   // first read predicted in time, -1 none
	missed                  []int // indexes of first reads of pages not predicted before
}

func analyse(evs []policies.Event, out []derived) analysis {
	predicted := map[uint64]int{}
	for _, d := range out {
		for _, p := range d.ev.Tree.Children {
			if _, ok := predicted[p]; !ok {
				predicted[p] = d.at
			}
		}
	}
	a := analysis{firstInTime: -1}
	read := map[uint64]bool{}
	for i, e := range evs {
		for p := e.Access.Page; p < e.Access.Page+uint64(max(e.Access.NPages, 1)); p++ {
			if read[p] {
				continue
			}
			read[p] = true
			a.distinct++
			if at, ok := predicted[p]; ok && at < i {
				a.inTime++
				if a.firstInTime < 0 {
					a.firstInTime = i
				}
			} else if p == e.Access.Page {
				a.missed = append(a.missed, i)
			}
		}
	}
	for p := range predicted {
		if !read[p] {
			a.never++
		}
	}
	return a
}

// golden compares derived events with a golden file, or rewrites it with
// -update.
func golden(t *testing.T, name string, out []derived) {
	t.Helper()
	var b strings.Builder
	for _, d := range out {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	path := filepath.Join(testdata, name)
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./adapters -update to create it)", err)
	}
	if got := b.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("%s: line %d:\n got %s\nwant %s\n(run go test ./adapters -update after checking the change)", name, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%s: %d lines, golden has %d", name, len(gl), len(wl))
	}
}

// TestSQLitePointLookups checks that descents to single rows, which enter
// one child per level, emit nothing by default and do when every entry
// emits (Confirm < 0).
func TestSQLitePointLookups(t *testing.T) {
	path := gunzip(t, "sqlite/without-rowid.db.gz", "x.db")
	es := readDbstat(t, "sqlite/without-rowid.dbstat")
	byPath := map[string]uint32{}
	for _, e := range es {
		byPath[e.path] = e.page
	}
	// Descents root -> child -> grandchild -> leaf for every 15th leaf, as
	// lookups of scattered keys read them.
	var evs []policies.Event
	add := func(p uint32) {
		evs = append(evs, accessOf(span{uint64(p-1) * 4096, 4096}, formats.KindRead, uint64(len(evs)+1)))
	}
	add(1)
	n := 0
	for i, e := range es {
		if e.typ != "leaf" || i%15 != 0 {
			continue
		}
		parts := strings.Split(strings.Trim(e.path, "/"), "/")
		p := "/"
		add(byPath[p])
		for _, part := range parts {
			p += part + "/"
			add(byPath[p])
		}
		n++
	}
	if n < 3 {
		t.Fatalf("only %d descents", n)
	}
	out, _ := run(t, Config{}, path, evs)
	if len(out) != 0 {
		t.Errorf("point lookups derived %d events; the first: %v", len(out), out[0])
	}
	out, _ = run(t, Config{Confirm: -1}, path, evs)
	if len(out) == 0 {
		t.Error("with Confirm < 0, point lookups derived nothing")
	}
}

// TestSQLiteWAL checks that a database in WAL mode is recognized and
// reported as such, with one warning.
func TestSQLiteWAL(t *testing.T) {
	path := gunzip(t, "sqlite/without-rowid.db.gz", "x.db")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{2, 2}, 18); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var warnings []string
	evs := readEvents(readSpans(t, "sqlite/without-rowid-key.reads"))
	out, s := run(t, Config{Warn: func(m string) { warnings = append(warnings, m) }}, path, evs)
	if len(out) == 0 {
		t.Error("no events derived from a WAL-mode database")
	}
	st := s.Status()
	if len(st) != 1 || !strings.Contains(st[0].Detail, "WAL") {
		t.Errorf("status %+v does not say WAL", st)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "-wal file") {
		t.Errorf("warnings %q, want one about the -wal file", warnings)
	}
}

// TestSQLiteWALFile checks that a -wal file is recognized and reported,
// and derives nothing. The header is the one Debian's sqlite3 writes (a
// live -wal file of 4 KiB pages starts 377f0682 002de218 00001000).
func TestSQLiteWALFile(t *testing.T) {
	hdr := make([]byte, 32)
	binary.BigEndian.PutUint32(hdr, 0x377f0682)
	binary.BigEndian.PutUint32(hdr[4:], 3007000)
	binary.BigEndian.PutUint32(hdr[8:], 4096)
	path := writeTempFile(t, "db-wal", append(hdr, make([]byte, 8192)...))
	var warns []string
	out, s := run(t, Config{Warn: func(m string) { warns = append(warns, m) }}, path,
		[]policies.Event{*accessEv(1, formats.KindRead, 0), *accessEv(1, formats.KindRead, 1)})
	st := s.Status()
	if len(out) != 0 || len(st) != 1 || !strings.Contains(st[0].Detail, "write-ahead log") || !strings.Contains(st[0].Detail, "2 accesses") {
		t.Errorf("events %v status %+v", out, st)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "write-ahead log") {
		t.Errorf("warnings %q", warns)
	}
	binary.BigEndian.PutUint32(hdr[4:], 3007001)
	if isSQLiteWAL(hdr) {
		t.Error("a WAL header of another format version was recognized")
	}
}

func writeTempFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSQLiteSkippedPages checks that pointer-map pages of an auto-vacuum
// database, the lock-byte page and freelist trunks are never parsed as
// B-tree pages, although their first byte can look like a page type.
func TestSQLiteSkippedPages(t *testing.T) {
	f := &sqliteFile{pageSize: 4096, usable: 4096, pages: 1 << 20, autoVac: true}
	per := uint32(4096/5 + 1)
	for _, p := range []uint32{2, 2 + per, 2 + 5*per} {
		if !f.ptrmap(p) || !f.skip(p) {
			t.Errorf("page %d is a pointer-map page", p)
		}
	}
	for _, p := range []uint32{1, 3, 1 + per, 3 + per} {
		if f.ptrmap(p) {
			t.Errorf("page %d is not a pointer-map page", p)
		}
	}
	lock := uint32(sqlitePending/4096 + 1)
	if !f.skip(lock) || f.valid(lock) {
		t.Errorf("lock-byte page %d not skipped", lock)
	}
	// The pointer-map page that would fall on the lock-byte page moves to
	// the page after it.
	for m := uint32(2); m < lock+per; m += per {
		if m == lock && !f.ptrmap(lock+1) {
			t.Errorf("pointer-map page after the lock-byte page %d not recognized", lock+1)
		}
	}
	f.addTrunk(77)
	if !f.skip(77) {
		t.Error("freelist trunk not skipped")
	}

	// A real database with the auto-vacuum field set: page 2, its root,
	// is then a pointer-map page, so the scan derives nothing from it.
	path := gunzip(t, "sqlite/without-rowid.db.gz", "x.db")
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteAt([]byte{0, 0, 0, 2}, 52)
	w.Close()
	evs := readEvents(readSpans(t, "sqlite/without-rowid-key.reads"))
	out, _ := run(t, Config{}, path, evs)
	for _, d := range out {
		if d.ev.Tree.ParentPage == 1 {
			t.Fatalf("event derived from page 2, a pointer-map page: %v", d)
		}
	}
}

// btreePage builds a B-tree page of type typ with the given cells.
func btreePage(size int, typ byte, right uint32, cells [][]byte) []byte {
	return btreePageAt(size, 0, typ, right, cells)
}

// btreePageAt builds a B-tree page whose header is at offset at (100 on
// page 1).
func btreePageAt(size, at int, typ byte, right uint32, cells [][]byte) []byte {
	pg := make([]byte, size)
	b := pg[at:]
	b[0] = typ
	h := 8
	if typ == sqliteIndexInterior || typ == sqliteTableInterior {
		h = 12
		binary.BigEndian.PutUint32(b[8:], right)
	}
	binary.BigEndian.PutUint16(b[3:], uint16(len(cells)))
	end := size
	for i, c := range cells {
		end -= len(c)
		copy(pg[end:], c)
		binary.BigEndian.PutUint16(b[h+2*i:], uint16(end))
	}
	binary.BigEndian.PutUint16(b[5:], uint16(end))
	return pg
}

func tableInteriorCell(child uint32, rowid byte) []byte {
	c := binary.BigEndian.AppendUint32(nil, child)
	return append(c, rowid)
}

// TestSQLiteMalformedCells checks that pointers out of range, to the page
// itself, or cells outside the page are dropped and counted.
func TestSQLiteMalformedCells(t *testing.T) {
	f := &sqliteFile{pageSize: 4096, usable: 4096, pages: 100}
	f.t.init(2, &Config{Ahead: 16, PageSize: 4096, Confirm: 2}, 1, 4096, true)
	var st Stats
	pg := btreePage(4096, sqliteTableInterior, 9, [][]byte{
		tableInteriorCell(5, 1),
		tableInteriorCell(7, 2),   // 7 is the page itself
		tableInteriorCell(500, 3), // beyond the database
		tableInteriorCell(0, 4),
		tableInteriorCell(6, 5),
	})
	// A cell pointer into the header, one past the page.
	binary.BigEndian.PutUint16(pg[3:], 7)
	binary.BigEndian.PutUint16(pg[12+2*5:], 3)
	binary.BigEndian.PutUint16(pg[12+2*6:], 4095)
	kids, pool, ok := f.cells(pg, 0, 7, &st)
	if !ok || pool != poolTable {
		t.Fatalf("cells: ok %v pool %d", ok, pool)
	}
	var got []uint32
	for _, k := range kids {
		got = append(got, k.page)
	}
	if want := []uint32{5, 6, 9}; !slices.Equal(got, want) {
		t.Errorf("children %v, want %v", got, want)
	}
	if st.Malformed != 5 {
		t.Errorf("malformed %d, want 5", st.Malformed)
	}
	// A cell count the page cannot hold.
	binary.BigEndian.PutUint16(pg[3:], 4000)
	if _, _, ok := f.cells(pg, 0, 7, &st); ok {
		t.Error("a page claiming 4000 cells was accepted")
	}
	// An index leaf whose overflow pointer is the page itself.
	cell := []byte{0x88, 0x00} // payload of 1024 bytes: 489 stay local
	cell = append(cell, make([]byte, 489)...)
	cell = binary.BigEndian.AppendUint32(cell, 8)
	pg = btreePage(4096, sqliteIndexLeaf, 0, [][]byte{cell})
	st = Stats{}
	if kids, _, _ := f.cells(pg, 0, 8, &st); len(kids) != 0 || st.Malformed != 1 {
		t.Errorf("self-referencing overflow pointer: kids %v malformed %d", kids, st.Malformed)
	}
	// A cell that ends before its overflow pointer.
	pg = btreePage(4096, sqliteIndexLeaf, 0, [][]byte{cell[:400]})
	st = Stats{}
	if kids, _, _ := f.cells(pg, 0, 8, &st); len(kids) != 0 || st.Malformed != 1 {
		t.Errorf("truncated cell: kids %v malformed %d", kids, st.Malformed)
	}
}

// TestSQLiteOverflowChain checks that a long value's chain is followed
// one link per page read, and that its length, not its pointers, ends it:
// the last page here points back to the first.
func TestSQLiteOverflowChain(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "chain.db")
	const ps = 4096
	pages := make([][]byte, 8)
	for i := range pages {
		pages[i] = make([]byte, ps)
	}
	h := pages[0]
	copy(h, sqliteMagic)
	binary.BigEndian.PutUint16(h[16:], ps)
	h[18], h[19], h[21], h[22], h[23] = 1, 1, 64, 32, 32
	binary.BigEndian.PutUint32(h[28:], 8)
	// Page 2: an index leaf with one cell of 10000 bytes: 489 local, and
	// ceil(9511/4092) = 3 overflow pages: 5 -> 3 -> 6, and 6 -> 5.
	cell := []byte{0xce, 0x10} // 10000
	cell = append(cell, make([]byte, 489)...)
	cell = binary.BigEndian.AppendUint32(cell, 5)
	copy(pages[1], btreePage(ps, sqliteIndexLeaf, 0, [][]byte{cell}))
	binary.BigEndian.PutUint32(pages[4], 3) // page 5 -> 3
	binary.BigEndian.PutUint32(pages[2], 6) // page 3 -> 6
	binary.BigEndian.PutUint32(pages[5], 5) // page 6 -> 5: a cycle
	binary.BigEndian.PutUint32(pages[6], 7) // page 7 -> 7: itself
	var all []byte
	for _, p := range pages {
		all = append(all, p...)
	}
	if err := os.WriteFile(path, all, 0o644); err != nil {
		t.Fatal(err)
	}
	var evs []policies.Event
	for _, p := range []uint64{0, 1, 4, 2, 5, 6} { // OS pages: header, leaf, 5, 3, 6, 7
		evs = append(evs, accessOf(span{p * ps, ps}, formats.KindRead, uint64(len(evs)+1)))
	}
	out, s := run(t, Config{}, path, evs)
	var got []string
	for _, d := range out {
		got = append(got, fmt.Sprintf("%d:%d->%v", d.at, d.ev.Tree.ParentPage, d.ev.Tree.Children))
	}
	// Page 5 (OS page 4) read: next is 3 (OS page 2); page 3 read: next
	// is 6 (OS page 5); page 6 is the chain's last page, so its pointer
	// back to 5 is not followed.
	want := []string{"2:4->[2]", "3:2->[5]"}
	if !slices.Equal(got, want) {
		t.Errorf("chain events %v, want %v", got, want)
	}
	if s.Stats().Malformed != 0 {
		t.Errorf("malformed %d", s.Stats().Malformed)
	}
}

// TestSQLiteRecordedBundle runs the adapter on a bundle predictio record
// made of the key scan: the kernel's read accesses (one per read-path
// lookup) rather than the shell's preads, with the other kinds it records
// mixed in, which the stage must ignore.
func TestSQLiteRecordedBundle(t *testing.T) {
	b, err := formats.Open(filepath.Join(testdata, "sqlite", "without-rowid-key.bundle"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	var id uint32
	found := false
	for _, f := range files {
		if filepath.Base(f.Path) == "without-rowid.db" {
			id, found = f.ID, true
		}
	}
	if !found {
		t.Fatal("the bundle has no file without-rowid.db")
	}
	db := gunzip(t, "sqlite/without-rowid.db.gz", "x.db")
	cur, err := b.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	var evs []policies.Event
	kinds := map[formats.AccessKind]int{}
	for cur.Next() {
		a := cur.At()
		if a.FileID != id {
			continue
		}
		var ev policies.Event
		ev.FromAccess(a)
		ev.File = 1
		evs = append(evs, ev)
		kinds[a.Kind]++
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	if kinds[formats.KindRead] < 200 || kinds[formats.KindCacheAdd] == 0 {
		t.Fatalf("bundle kinds %v: want the scan's reads and cache inserts", kinds)
	}
	out, s := run(t, Config{}, db, evs)
	var reads []policies.Event
	for _, e := range evs {
		if e.Access.Kind == formats.KindRead {
			reads = append(reads, e)
		}
	}
	// Re-index the derived events on the read accesses only.
	at := map[int]int{}
	n := 0
	for i, e := range evs {
		if e.Access.Kind == formats.KindRead {
			at[i] = n
			n++
		} else {
			at[i] = n // derived from nothing but reads; kept for safety
		}
	}
	for i := range out {
		out[i].at = at[out[i].at]
	}
	r := analyse(reads, out)
	inTime := float64(r.inTime) / float64(r.distinct)
	t.Logf("%d accesses (%v), %d reads of %d distinct pages, %.3f predicted in time, %d events, stats %+v", len(evs), kinds, len(reads), r.distinct, inTime, len(out), s.Stats())
	if inTime < 0.7 {
		t.Errorf("%.3f of the pages read were predicted in time, want at least 0.7", inTime)
	}
	if s.Stats().Accesses != uint64(len(reads)+kinds[formats.KindFault]+kinds[formats.KindMap]) {
		t.Errorf("the stage handled %d accesses; only the %d demand ones count", s.Stats().Accesses, len(reads))
	}
}
