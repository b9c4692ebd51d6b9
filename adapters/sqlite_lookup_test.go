package adapters

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/testenv"
	"github.com/predictio/predictio/internal/workload/sqlitedb"
	"github.com/predictio/predictio/policies"
)

func TestSQLiteSerialTypes(t *testing.T) {
	for _, c := range []struct {
		t    uint64
		size uint64
		ok   bool
	}{
		{0, 0, true}, {1, 1, true}, {4, 4, true}, {5, 6, true}, {6, 8, true}, {7, 8, true},
		{8, 0, true}, {9, 0, true}, {10, 0, false}, {11, 0, false}, {12, 0, true}, {13, 0, true},
		{14, 1, true}, {41, 14, true}, // TEXT of 14 bytes: "user0000000001"
	} {
		if n, ok := sqliteSerialSize(c.t); n != c.size || ok != c.ok {
			t.Errorf("serial type %d: size %d %v, want %d %v", c.t, n, ok, c.size, c.ok)
		}
	}
	for _, c := range []struct {
		t    uint64
		b    []byte
		want int64
		ok   bool
	}{
		{1, []byte{0x7f}, 127, true},
		{1, []byte{0xff}, -1, true},
		{2, []byte{0x01, 0x00}, 256, true},
		{3, []byte{0xff, 0xff, 0xfe}, -2, true},
		{4, []byte{0x00, 0x01, 0x00, 0x00}, 65536, true},
		{5, []byte{0x80, 0, 0, 0, 0, 0}, -1 << 47, true},
		{6, []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, math.MaxInt64, true},
		{8, nil, 0, true},
		{9, nil, 1, true},
		{4, []byte{1, 2}, 0, false}, // short
		{7, make([]byte, 8), 0, false},
		{13, nil, 0, false},
	} {
		if v, ok := sqliteInt(c.t, c.b); v != c.want || ok != c.ok {
			t.Errorf("sqliteInt(%d, %x) = %d %v, want %d %v", c.t, c.b, v, ok, c.want, c.ok)
		}
	}
}

// makeRecord encodes a record of the given serial types and bodies.
func makeRecord(types []uint64, bodies ...[]byte) []byte {
	var hdr []byte
	for _, t := range types {
		hdr = appendVarint(hdr, t)
	}
	n := uint64(len(hdr) + 1)
	if n > 127 {
		n++
	}
	rec := appendVarint(nil, n)
	rec = append(rec, hdr...)
	for _, b := range bodies {
		rec = append(rec, b...)
	}
	return rec
}

// appendVarint appends v as a SQLite varint.
func appendVarint(b []byte, v uint64) []byte {
	if v > 1<<56-1 {
		b = appendVarint(b, v>>8|1<<56) // not needed by these tests
		return b
	}
	var tmp [9]byte
	n := 0
	for {
		tmp[n] = byte(v & 0x7f)
		n++
		v >>= 7
		if v == 0 {
			break
		}
	}
	for i := n - 1; i >= 0; i-- {
		c := tmp[i]
		if i > 0 {
			c |= 0x80
		}
		b = append(b, c)
	}
	return b
}

func text(s string) uint64 { return uint64(13 + 2*len(s)) }

func TestSQLiteRecordRowid(t *testing.T) {
	key := "user0000000042"
	for _, c := range []struct {
		name string
		rec  []byte
		want int64
		ok   bool
	}{
		{"text key, 2-byte rowid", makeRecord([]uint64{text(key), 2}, []byte(key), []byte{0x0b, 0xb8}), 3000, true},
		{"two columns, rowid 1", makeRecord([]uint64{1, 0, 9}, []byte{5}), 1, true},
		{"negative rowid", makeRecord([]uint64{text("k"), 6}, []byte("k"), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}), -2, true},
		{"rowid not an integer", makeRecord([]uint64{text("k"), 7}, []byte("k"), make([]byte, 8)), 0, false},
		{"a single column", makeRecord([]uint64{1}, []byte{5}), 0, false},
		{"body cut short", makeRecord([]uint64{text(key), 4}, []byte(key), []byte{0, 0}), 0, false},
		{"reserved type", makeRecord([]uint64{10, 1}, []byte{5}), 0, false},
		{"header longer than the record", []byte{0x20, 0x01, 0x01}, 0, false},
		{"header length 0", []byte{0x00, 0x01}, 0, false},
		{"empty", nil, 0, false},
	} {
		if v, ok := sqliteRecordRowid(c.rec); v != c.want || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.name, v, ok, c.want, c.ok)
		}
	}
}

func TestSQLiteWithoutRowid(t *testing.T) {
	for sql, want := range map[string]bool{
		"CREATE TABLE t(a TEXT PRIMARY KEY, b) WITHOUT ROWID":               true,
		"create table t(a text primary key, b)\n  without\trowid":           true,
		"CREATE TABLE t(a PRIMARY KEY, b) STRICT, WITHOUT ROWID":            true,
		"CREATE TABLE t(a PRIMARY KEY, b) WITHOUT ROWID, STRICT":            true,
		"CREATE TABLE t(a TEXT PRIMARY KEY, b)":                             false,
		"CREATE TABLE t(a TEXT PRIMARY KEY, b) STRICT":                      false,
		"CREATE TABLE t(a DEFAULT 'without rowid', b)":                      false,
		"CREATE TABLE t(without, rowid)":                                    false,
		"CREATE TABLE t(a PRIMARY KEY) WITHOUTROWID":                        false,
		string(utf16("CREATE TABLE t(a PRIMARY KEY, b) WITHOUT ROWID")):     true,
		string(utf16("CREATE TABLE t(a PRIMARY KEY, b) WITHOUT ROWIDS, x")): false,
	} {
		if got := withoutRowid([]byte(sql)); got != want {
			t.Errorf("withoutRowid(%q) = %v", sql, got)
		}
	}
	if nameHash([]byte("UserTable")) != nameHash([]byte("usertable")) || nameHash(utf16("usertable")) != nameHash([]byte("usertable")) {
		t.Error("names that SQLite takes as one hash differently")
	}
	if nameHash([]byte("usertable")) == nameHash([]byte("usertable2")) {
		t.Error("two names hash the same")
	}
}

// utf16 encodes ASCII s as UTF-16le.
func utf16(s string) []byte {
	var b []byte
	for _, c := range []byte(s) {
		b = append(b, c, 0)
	}
	return b
}

func TestSQLiteSchemaRecords(t *testing.T) {
	var s sqliteSchema
	rec := func(typ, name, tbl string, root uint32, sql string) []byte {
		return makeRecord([]uint64{text(typ), text(name), text(tbl), 4, text(sql)},
			[]byte(typ), []byte(name), []byte(tbl), binary.BigEndian.AppendUint32(nil, root), []byte(sql))
	}
	for _, r := range [][]byte{
		rec("table", "usertable", "usertable", 2, "CREATE TABLE usertable(ycsb_key TEXT PRIMARY KEY, field0 BLOB)"),
		rec("index", "sqlite_autoindex_usertable_1", "usertable", 3, ""),
		rec("table", "kv", "kv", 4, "CREATE TABLE kv(k PRIMARY KEY, v) WITHOUT ROWID"),
		rec("index", "kv_v", "KV", 5, "CREATE INDEX kv_v ON kv(v)"),
		rec("view", "v", "v", 0, "CREATE VIEW v AS SELECT 1"),
		rec("index", "orphan", "gone", 6, ""),
	} {
		if !s.addRecord(r, 1) {
			t.Errorf("record %q rejected", r)
		}
	}
	if s.addRecord(makeRecord([]uint64{text("table"), text("x")}, []byte("table"), []byte("x")), 1) {
		t.Error("a record of two columns was accepted")
	}
	if s.addRecord(makeRecord([]uint64{text("table"), text("x"), text("x"), 7, 0}, []byte("table"), []byte("x"), []byte("x"), make([]byte, 8)), 1) {
		t.Error("a root page that is a float was accepted")
	}
	if tables, indexes := s.counts(); tables != 2 || indexes != 3 {
		t.Errorf("%d tables, %d indexes; want 2 and 3 (the view has no B-tree)", tables, indexes)
	}
	for root, want := range map[uint32]uint32{3: 2, 5: 0, 6: 0, 2: 0, 9: 0} {
		got, ok := s.tableOf(root)
		if ok != (want != 0) || (ok && got != want) {
			t.Errorf("tableOf(%d) = %d %v, want %d", root, got, ok, want)
		}
	}
	s.drop(1)
	if _, ok := s.tableOf(3); ok || len(s.objs) != 0 {
		t.Errorf("after drop: %+v", s.objs)
	}
}

// testDB is a testdata database and the structure dbstat reports.
type testDB struct {
	path string
	raw  []byte
	es   []dbstatEntry
	ps   int
}

func openTestDB(t *testing.T, name string) testDB {
	t.Helper()
	path := gunzip(t, "sqlite/"+name+".db.gz", "x.db")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return testDB{path: path, raw: raw, es: readDbstat(t, "sqlite/"+name+".dbstat"), ps: pageSizeOf(t, path)}
}

// root returns the root page of B-tree name.
func (d testDB) root(t *testing.T, name string) uint32 {
	for _, e := range d.es {
		if e.name == name && e.path == "/" {
			return e.page
		}
	}
	t.Fatalf("no B-tree %s", name)
	return 0
}

// leafOfRowid returns, from dbstat's cell counts, the table leaf holding
// each rowid: in path order the leaves of usertable hold rowids 1..N.
func (d testDB) leafOfRowid(t *testing.T) []uint32 {
	out := []uint32{0}
	for _, e := range d.es {
		if e.name == "usertable" && e.typ == "leaf" {
			if e.ncell < 0 {
				t.Fatal("the dbstat file has no cell counts")
			}
			for range e.ncell {
				out = append(out, e.page)
			}
		}
	}
	return out
}

// TestSQLiteSchema checks the schema the adapter reads from page 1 when
// it recognizes a file against the B-trees dbstat reports: every B-tree's
// root is known, an index of a rowid table leads to its table, and a
// WITHOUT ROWID table is one.
func TestSQLiteSchema(t *testing.T) {
	for _, c := range []struct {
		db, index  string
		withoutRow bool
	}{
		{"rowid-insert", "sqlite_autoindex_usertable_1", false},
		{"rowid-insert-1k", "sqlite_autoindex_usertable_1", false},
		{"rowid", "usertable_key", false},
		{"without-rowid", "", true},
		{"without-rowid-1k", "", true},
	} {
		d := openTestDB(t, c.db)
		p, err := newSQLite(d.raw[:4096], uint64(len(d.raw)), &Config{Ahead: 16, PageSize: 4096, Confirm: 2})
		if err != nil {
			t.Fatal(err)
		}
		f := p.(*sqliteFile)
		table := d.root(t, "usertable")
		for _, e := range d.es {
			if e.path == "/" && f.schema.object(e.page) == nil {
				t.Errorf("%s: the root %d of %s is not in the schema", c.db, e.page, e.name)
			}
		}
		if o := f.schema.object(table); o == nil || o.index || o.noRowid != c.withoutRow {
			t.Errorf("%s: table object %+v, want WITHOUT ROWID %v", c.db, o, c.withoutRow)
		}
		if c.index != "" {
			if got, ok := f.schema.tableOf(d.root(t, c.index)); !ok || got != table {
				t.Errorf("%s: index %s leads to %d %v, want table %d", c.db, c.index, got, ok, table)
			}
		}
	}
}

// TestSQLiteRowidMap checks the rowid map against dbstat's cell counts:
// with every table interior page of the table recorded, each rowid maps to
// the leaf that holds it; with the root alone, to the interior page above
// that leaf.
func TestSQLiteRowidMap(t *testing.T) {
	for _, db := range []string{"rowid-insert", "rowid-insert-1k"} {
		d := openTestDB(t, db)
		p, err := newSQLite(d.raw[:4096], uint64(len(d.raw)), &Config{Ahead: 16, PageSize: 4096, Confirm: 2})
		if err != nil {
			t.Fatal(err)
		}
		f := p.(*sqliteFile)
		root := d.root(t, "usertable")
		leafOf := d.leafOfRowid(t)
		parentOf := map[uint32]uint32{}
		for pg, l := range dbstatLists(d.es) {
			for _, k := range l {
				parentOf[k] = pg
			}
		}
		// below returns the root's child on the way to page p.
		below := func(p uint32) uint32 {
			for parentOf[p] != root {
				p = parentOf[p]
			}
			return p
		}
		var st Stats
		add := func(page uint32) {
			off := int(page-1) * d.ps
			if _, _, ok := f.cells(d.raw[off:off+int(f.usable)], 0, page, &st); !ok {
				t.Fatalf("page %d is not a B-tree page", page)
			}
			f.look.rows.add(page, f.look.keys, f.look.pages)
		}
		add(root)
		for r := int64(1); r < int64(len(leafOf)); r++ {
			if got, want := f.resolve(root, r, nil), below(leafOf[r]); got != want {
				t.Fatalf("%s: with the root alone rowid %d maps to %d, want %d, the root's child above leaf %d", db, r, got, want, leafOf[r])
			}
		}
		n := 0
		for _, e := range d.es {
			if e.name == "usertable" && e.typ == "internal" && e.page != root {
				add(e.page)
				n++
			}
		}
		for r := int64(1); r < int64(len(leafOf)); r++ {
			if got := f.resolve(root, r, nil); got != leafOf[r] {
				t.Fatalf("%s: rowid %d maps to %d, want leaf %d", db, r, got, leafOf[r])
			}
		}
		if got := f.resolve(root, int64(len(leafOf))+5, nil); got != leafOf[len(leafOf)-1] {
			t.Errorf("%s: a rowid past the last maps to %d, want the last leaf %d", db, got, leafOf[len(leafOf)-1])
		}
		t.Logf("%s: %d rowids, %d interior pages below the root", db, len(leafOf)-1, n)
		if st.Malformed != 0 {
			t.Errorf("%s: %d malformed", db, st.Malformed)
		}
	}
}

// TestRowidMapRing fills the map far beyond its bound: memory stays
// bounded, old pages are dropped but remembered as read, and a page every
// descent uses (a root) stays held.
func TestRowidMapRing(t *testing.T) {
	var m rowidMap
	const n = 400
	keys, kids := make([]int64, n), make([]uint32, n)
	rootKeys, rootKids := []int64{1000, math.MaxInt64}, []uint32{10, 11}
	m.add(2, rootKeys, rootKids)
	for p := uint32(100); p < 3100; p++ {
		for i := range n {
			keys[i], kids[i] = int64(p)*n+int64(i), p*7+uint32(i)
		}
		keys[n-1] = math.MaxInt64
		m.add(p, keys, kids)
		if c, ok := m.child(2, 5); !ok || c != 10 {
			t.Fatalf("after page %d: the root maps 5 to %d %v", p, c, ok)
		}
	}
	if len(m.keys) > maxRowidEntries || len(m.dir) > maxMapDir {
		t.Errorf("ring %d, directory %d entries", len(m.keys), len(m.dir))
	}
	if !m.dropped(100) {
		t.Error("the oldest page is still held or forgotten")
	}
	if c, ok := m.child(3099, 3099*n+5); !ok || c != 3099*7+5 {
		t.Errorf("the newest page maps to %d %v", c, ok)
	}
	if m.dropped(77) || m.lookup(77) != nil {
		t.Error("a page never added is known")
	}
	// Adding the same entries again keeps the copy; changed entries replace it.
	head := m.head
	m.add(3099, keys, kids)
	if m.head != head {
		t.Error("an unchanged page was copied again")
	}
	kids[5] = 1
	m.add(3099, keys, kids)
	if c, _ := m.child(3099, 3099*n+5); c != 1 {
		t.Errorf("a changed page maps to %d", c)
	}
}

// lookupCase is a range scan through the automatic index of a
// rowid-insert database, which looks each row up in the table.
type lookupCase struct {
	db, reads string
	// minLeaves is the share of the distinct table leaves read that must
	// have been predicted before they were read.
	minLeaves float64
}

var lookupScans = []lookupCase{
	{"rowid-insert", "rowid-insert-key", 0.9},
	{"rowid-insert", "rowid-insert-desc", 0.9},
	{"rowid-insert-1k", "rowid-insert-1k-key", 0.8},
}

// readEventsPS turns spans into read accesses in pages of ps bytes.
func readEventsPS(spans []span, ps uint64) []policies.Event {
	evs := make([]policies.Event, len(spans))
	for i, s := range spans {
		first, last := s.off/ps, (s.off+max(s.n, 1)-1)/ps
		evs[i] = policies.Event{Kind: policies.EventFileAccess, TS: uint64(1000 * (i + 1)), PID: 7, TID: 7, File: 1,
			Access: policies.FileAccess{Kind: formats.KindRead, Page: first, NPages: uint32(last - first + 1)}}
	}
	return evs
}

// lookupStats compares a scan's reads of the table's leaves with what was
// predicted, in the database's pages (the stage runs with the database's
// page size, so a stage page is a database page, less one).
type lookupStats struct {
	leaves, inTime, never int
	missed                []int // reads of table leaves not predicted before
}

func analyseLookups(d testDB, evs []policies.Event, out []derived) lookupStats {
	typ := map[uint64]dbstatEntry{}
	for _, e := range d.es {
		typ[uint64(e.page-1)] = e
	}
	predicted := map[uint64]int{}
	for _, x := range out {
		for _, p := range x.ev.Tree.Children {
			if _, ok := predicted[p]; !ok {
				predicted[p] = x.at
			}
		}
	}
	var s lookupStats
	read := map[uint64]bool{}
	for i, e := range evs {
		p := e.Access.Page
		if read[p] {
			continue
		}
		read[p] = true
		if e := typ[p]; e.name != "usertable" || e.typ != "leaf" {
			continue
		}
		s.leaves++
		if at, ok := predicted[p]; ok && at < i {
			s.inTime++
		} else {
			s.missed = append(s.missed, i)
		}
	}
	for p := range predicted {
		if !read[p] {
			s.never++
		}
	}
	return s
}

// TestSQLiteLookupScans runs the adapter on the preads of real range scans
// by the sqlite3 shell through the index of a rowid table whose rowids are
// unrelated to the key, so each row is a random table lookup. It checks
// the events against the golden file; that most table leaves read were
// predicted before they were read; that every one that was not is one no
// prediction from pages the program read can beat: the first lookup after
// an index page is read, a lookup that read a table interior page just
// before (its descent: the adapter knows the leaf only from that page),
// or one of the first Confirm+1 lookups, which establish the scan; and that
// the pages predicted but never read are bounded.
func TestSQLiteLookupScans(t *testing.T) {
	for _, c := range lookupScans {
		t.Run(c.reads, func(t *testing.T) {
			d := openTestDB(t, c.db)
			ps := uint64(d.ps)
			evs := readEventsPS(readSpans(t, "sqlite/"+c.reads+".reads"), ps)
			out, st := run(t, Config{PageSize: int(ps)}, d.path, evs)
			golden(t, "sqlite/"+c.reads+".golden", out)
			typ := map[uint64]dbstatEntry{}
			for _, e := range d.es {
				typ[uint64(e.page-1)] = e
			}
			kind := func(i int) string {
				if i < 0 || i >= len(evs) {
					return ""
				}
				e := typ[evs[i].Access.Page]
				switch {
				case e.name == "usertable":
					return "table " + e.typ
				case e.name != "":
					return "index " + e.typ
				}
				return "other"
			}
			s := analyseLookups(d, evs, out)
			lookups := 0
			missed := map[int]bool{}
			for _, i := range s.missed {
				missed[i] = true
			}
			why := map[string]int{}
			for i := range evs {
				if kind(i) != "table leaf" {
					continue
				}
				lookups++
				if !missed[i] {
					continue
				}
				switch {
				case kind(i-1) == "index leaf":
					why["first lookup of an index leaf"]++
				case kind(i-1) == "table internal":
					why["after its descent read a table interior page"]++
				case lookups <= DefaultConfirm+1:
					why["establishing the scan"]++

				default:
					t.Errorf("read %d of table leaf %d (%s) was not predicted, after a read of %s", i, evs[i].Access.Page+1, typ[evs[i].Access.Page].path, kind(i-1))
				}
			}
			share := float64(s.inTime) / float64(s.leaves)
			t.Logf("%d reads, %d distinct table leaves, %.3f predicted in time, %d pages predicted never read, %d events; misses %v; stats %+v",
				len(evs), s.leaves, share, s.never, len(out), why, st.Stats())
			if share < c.minLeaves {
				t.Errorf("%.3f of the table leaves read were predicted in time, want at least %.2f", share, c.minLeaves)
			}
			// Never read: the Ahead lookups after the scan's end, the
			// index pages requested ahead (Ahead per level of the index,
			// by the lookups near a leaf's end and by the index scan).
			if bound := 3 * DefaultAhead; s.never > bound {
				t.Errorf("%d pages predicted but never read, want at most %d", s.never, bound)
			}
			// The header read that recognizes the file is 4 KiB; with
			// smaller pages the program's first read covered one of them.
			if io := 4096/ps - 1; st.Stats().PagesIO > io || st.Stats().Lookups < uint64(s.leaves/2) {
				t.Errorf("stats %+v: want no reads of pages the program had not just read (but %d of the header), and the lookups matched", st.Stats(), io)
			}
		})
	}
}

// TestSQLiteLookupsNoScan checks that what is not a scan with lookups
// predicts no lookups: point lookups of single rows by key (an index
// descent and one table row each) derive nothing, and a scan of a
// covering index, which reads no table rows, predicts no table page.
func TestSQLiteLookupsNoScan(t *testing.T) {
	d := openTestDB(t, "rowid-insert")
	evs := readEvents(readSpans(t, "sqlite/rowid-insert-points.reads"))
	out, st := run(t, Config{}, d.path, evs)
	if len(out) != 0 {
		t.Errorf("12 point lookups derived %d events; the first %v", len(out), out[0])
	}
	if st.Stats().Lookups == 0 {
		t.Error("the point lookups' table leaves were not matched to their index entries")
	}
	evs = readEvents(readSpans(t, "sqlite/rowid-insert-covering.reads"))
	out, _ = run(t, Config{}, d.path, evs)
	typ := map[uint64]string{}
	for _, e := range d.es {
		typ[uint64(e.page-1)] = e.name
	}
	for _, x := range out {
		for _, p := range x.ev.Tree.Children {
			if typ[p] == "usertable" {
				t.Fatalf("a covering index scan predicted table page %d: %v", p+1, x)
			}
		}
	}
}

// TestSQLiteLookupsBuilt builds a larger database of the rowid-insert
// layout with the real shell (30000 rows, 25 table interior pages, so a
// scan's lookups keep reaching interior pages for the first time) and runs
// the adapter on the strace'd reads of scans through its index, ascending
// and descending, then with a rowid map too small for the table: dropped
// interior pages are read again (pages the program read before), never
// others, and the prediction holds.
func TestSQLiteLookupsBuilt(t *testing.T) {
	testenv.Tool(t, "sqlite3")
	db := filepath.Join(t.TempDir(), "y.db")
	if err := sqlitedb.Build(context.Background(), sqlitedb.Config{Path: db, Layout: sqlitedb.RowidInsert, Rows: 30000, Seed: 7, Compressible: true}); err != nil {
		t.Fatal(err)
	}
	asc, _ := sqlitedb.ScanSQL(sqlitedb.RowidInsert, sqlitedb.ByKey, 5000, 2000)
	dump, err := exec.Command("sqlite3", "-batch", db, "SELECT name, path, pageno, pagetype, ncell FROM dbstat WHERE name != 'sqlite_schema' ORDER BY name, path").Output()
	if err != nil {
		t.Fatal(err)
	}
	d := testDB{path: db, ps: 4096}
	for _, l := range strings.Split(strings.TrimSpace(string(dump)), "\n") {
		f := strings.Split(l, "|")
		var e dbstatEntry
		e.name, e.path, e.typ = f[0], f[1], f[3]
		var p uint64
		for _, c := range f[2] {
			p = p*10 + uint64(c-'0')
		}
		e.page = uint32(p)
		d.es = append(d.es, e)
	}
	for _, c := range []struct {
		name, query string
		ring        int
	}{
		{"ascending", asc, 0},
		{"descending", sqlitedb.ScanDescSQL(20000, 2000), 0},
		{"small map", asc, 2048},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs := traceScan(t, db, c.query)
			s, err := NewStage(Config{}, PathFiles{Path: func(uint32) (string, bool) { return db, true }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var out []derived
			for i := range evs {
				s.Process(&evs[i], func(ev *policies.Event, name string) {
					x := *ev
					x.Tree.Children = slices.Clone(ev.Tree.Children)
					out = append(out, derived{at: i, adapter: name, ev: x})
				})
				if i == 0 && c.ring > 0 {
					s.states[1].p.(*sqliteFile).look.rows.max = c.ring
				}
			}
			a := analyseLookups(d, evs, out)
			share := float64(a.inTime) / float64(a.leaves)
			st := s.Stats()
			t.Logf("%d reads, %d distinct table leaves, %.3f predicted in time, %d predicted never read; stats %+v", len(evs), a.leaves, share, a.never, st)
			if share < 0.9 {
				t.Errorf("%.3f of the table leaves read were predicted in time, want at least 0.9", share)
			}
			if a.never > 3*DefaultAhead {
				t.Errorf("%d pages predicted never read", a.never)
			}
			if st.PagesIO != 0 {
				t.Errorf("the adapter read %d pages the program had not read", st.PagesIO)
			}
			if c.ring > 0 && st.PagesEarlier == 0 {
				t.Error("with a small map no interior page was read again")
			}
		})
	}
}

// dbstatOf returns the B-tree structure of the database at path as the
// sqlite3 shell's dbstat reports it.
func dbstatOf(t *testing.T, path string) []dbstatEntry {
	t.Helper()
	dump, err := exec.Command("sqlite3", "-batch", path, "SELECT name, path, pageno, pagetype, ncell FROM dbstat WHERE name != 'sqlite_schema' ORDER BY name, path").Output()
	if err != nil {
		t.Fatalf("dbstat of %s: %v", path, err)
	}
	var es []dbstatEntry
	for _, l := range strings.Split(strings.TrimSpace(string(dump)), "\n") {
		f := strings.Split(l, "|")
		if len(f) != 5 {
			t.Fatalf("dbstat line %q", l)
		}
		p, err1 := strconv.ParseUint(f[2], 10, 32)
		n, err2 := strconv.Atoi(f[4])
		if err1 != nil || err2 != nil {
			t.Fatalf("dbstat line %q", l)
		}
		es = append(es, dbstatEntry{name: f[0], path: f[1], page: uint32(p), typ: f[3], ncell: n})
	}
	return es
}

// traceScan runs the sqlite3 shell on queries under strace and returns
// its reads of the database at path as read accesses.
func traceScan(t *testing.T, path string, queries ...string) []policies.Event {
	t.Helper()
	return traceScanPS(t, DefaultPageSize, path, queries...)
}

// traceScanPS is traceScan in pages of ps bytes.
func traceScanPS(t *testing.T, ps uint64, path string, queries ...string) []policies.Event {
	t.Helper()
	reads, err := sqlitedb.TraceReads(context.Background(), sqlitedb.ScanArgs("", path, queries[0], queries[1:]...), path)
	if err != nil {
		t.Fatal(err)
	}
	spans := make([]span, len(reads))
	for i, r := range reads {
		spans[i] = span{r.Off, r.Len}
	}
	return readEventsPS(spans, ps)
}

// TestSQLiteLookupsBigSchema builds, with the real shell, a UTF-16
// database whose schema of 200 tables with their automatic indexes and a
// WITHOUT ROWID table fills several pages (page 1 is then an interior
// page), and scans one of the last tables through its index: the schema
// is read from the pages the program reads at open, and the lookups of
// the scan are predicted.
func TestSQLiteLookupsBigSchema(t *testing.T) {
	testenv.Tool(t, "sqlite3")
	db := filepath.Join(t.TempDir(), "schema.db")
	var sql strings.Builder
	sql.WriteString("PRAGMA encoding='UTF-16le';\nBEGIN;\n")
	for i := range 200 {
		fmt.Fprintf(&sql, "CREATE TABLE \"Table %d\"(ycsb_key TEXT PRIMARY KEY, field0 BLOB);\n", i)
	}
	sql.WriteString("CREATE TABLE kv(k INTEGER PRIMARY KEY, v) WITHOUT ROWID;\nCREATE INDEX kv_v ON kv(v);\n")
	// 3000 rows in a fixed random order: x*7919 mod 3001 permutes 1..3000.
	sql.WriteString(`INSERT INTO "Table 150" SELECT printf('user%010d', x*7919 % 3001), zeroblob(1000) FROM
		(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 3000) SELECT x FROM c);
		COMMIT;`)
	cmd := exec.Command("sqlite3", "-batch", db)
	cmd.Stdin = strings.NewReader(sql.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sqlite3: %v: %s", err, out)
	}
	es := dbstatOf(t, db)
	scan := `SELECT count(*), sum(length(field0)) FROM (SELECT field0 FROM "Table 150" WHERE ycsb_key >= 'user0000000300' ORDER BY ycsb_key LIMIT 600)`
	evs := traceScan(t, db, scan)
	out, s := run(t, Config{}, db, evs)
	f := s.states[1].p.(*sqliteFile)
	if raw, _ := os.ReadFile(db); raw[100] != sqliteTableInterior {
		t.Fatalf("page 1 has type %#x: the schema fits one page", raw[100])
	}
	if tables, indexes := f.schema.counts(); tables != 201 || indexes != 201 {
		t.Errorf("schema: %d tables, %d indexes; want 201 and 201", tables, indexes)
	}
	var table, kv uint32
	for _, e := range es {
		if e.path == "/" && e.name == "Table 150" {
			table = e.page
		}
		if e.path == "/" && e.name == "kv" {
			kv = e.page
		}
	}
	if o := f.schema.object(kv); o == nil || !o.noRowid {
		t.Errorf("kv, a WITHOUT ROWID table, is %+v", o)
	}
	for _, e := range es {
		if e.path == "/" && e.name == "kv_v" {
			if _, ok := f.schema.tableOf(e.page); ok {
				t.Error("an index of a WITHOUT ROWID table leads to a rowid table")
			}
		}
	}
	// Rename the table's B-trees as the lookup analysis expects.
	d := testDB{path: db, ps: 4096}
	for _, e := range es {
		if e.name == "Table 150" {
			e.name = "usertable"
		}
		d.es = append(d.es, e)
	}
	a := analyseLookups(d, evs, out)
	share := float64(a.inTime) / float64(a.leaves)
	t.Logf("table root %d; %d reads, %d table leaves, %.3f predicted in time, %d predicted never read; stats %+v", table, len(evs), a.leaves, share, a.never, s.Stats())
	if share < 0.9 || a.never > 3*DefaultAhead {
		t.Errorf("%.3f of the table leaves predicted in time (want 0.9), %d never read", share, a.never)
	}
}

// TestSQLiteLookupsCorpus runs the hand-made database of the fuzz corpus
// (lookupsDB): its schema, interior pages and the rows of an index scan
// with Confirm < 0, so that every lookup emits: the scan reads index leaf
// 4, rows 1 (leaf 6) and 3 (leaf 7, the row of index interior page 3's
// cell), then leaf 5 and rows 2 (leaf 6, spilling to page 8) and 4 (leaf 7).
func TestSQLiteLookupsCorpus(t *testing.T) {
	path := writeTempFile(t, "lookups.db", lookupsDB())
	var evs []policies.Event
	for _, p := range []uint64{0, 2, 1, 3, 5, 6, 4, 5, 7, 6} { // 512-byte pages: 1, 3, 2, 4, 6, 7, 5, 6, 8, 7
		evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: uint64(len(evs) + 1), PID: 7, File: 1,
			Access: policies.FileAccess{Kind: formats.KindRead, Page: p, NPages: 1}})
	}
	out, s := run(t, Config{PageSize: 512, Confirm: -1}, path, evs)
	var got []string
	for _, d := range out {
		got = append(got, d.String())
	}
	f := s.states[1].p.(*sqliteFile)
	if tables, indexes := f.schema.counts(); tables != 1 || indexes != 1 {
		t.Fatalf("schema: %d tables, %d indexes", tables, indexes)
	}
	// Stage pages are database pages less one.
	want := []string{
		"3 sqlite tree parent=2 pos=0 children=[4]",   // index interior 3 entered at leaf 4: leaf 5 next
		"4 sqlite tree parent=1 pos=0 children=[6]",   // table interior 2 entered at leaf 6: leaf 7 next
		"4 sqlite tree parent=3 pos=0 children=[6]",   // leaf 4's row 1 looked up: row 3 (leaf 7) next
		"6 sqlite tree parent=4 pos=0 children=[5 6]", // leaf 5 continues the scan: rows 2 and 4 (leaves 6, 7)
		"7 sqlite tree parent=4 pos=1 children=[6]",   // row 2 looked up: row 4 (leaf 7) next
		"7 sqlite tree parent=5 pos=1 children=[7]",   // row 2, cell 1 of leaf 6, spills to page 8
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s.Stats().Lookups != 4 || s.Stats().Malformed != 0 {
		t.Errorf("stats %+v: want the 4 lookups matched", s.Stats())
	}
}

// simFiles opens a file whose page cache is simulated: it holds the pages
// the program read and those predicted at least lag accesses before.
type simFiles struct {
	path   string
	ps     int64
	cached map[uint64]int // page -> the access from which it is cached
	now    int
}

type simContent struct {
	OSContent
	s *simFiles
}

func (f *simFiles) Open(uint32, uint32) (Content, error) {
	o, err := os.Open(f.path)
	if err != nil {
		return nil, err
	}
	return simContent{OSContent{o}, f}, nil
}

func (c simContent) Cached(off, n int64) (bool, error) {
	for p := off / c.s.ps; p <= (off+n-1)/c.s.ps; p++ {
		if at, ok := c.s.cached[uint64(p)]; !ok || at > c.s.now {
			return false, nil
		}
	}
	return true, nil
}

// cachedRun is what a stage predicted over a program's reads with a
// simulated page cache (simFiles) that holds the pages the program read
// and those predicted at least lag reads before: the pages cached in time
// for their first read, the distinct pages read, the pages predicted and
// never read, and the stage's counters.
type cachedRun struct {
	inTime, distinct, never int
	st                      Stats
}

func (c cachedRun) share() float64 { return float64(c.inTime) / float64(c.distinct) }

// runCached runs a stage (page size ps, Config.ReadCached as given) over
// evs, one page each, against the file at path with a simulated cache.
func runCached(t *testing.T, path string, ps int64, readCached bool, lag int, evs []policies.Event) cachedRun {
	t.Helper()
	files := &simFiles{path: path, ps: ps, cached: map[uint64]int{}}
	s, err := NewStage(Config{PageSize: int(ps), ReadCached: readCached}, files)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var r cachedRun
	predicted, read := map[uint64]bool{}, map[uint64]bool{}
	for i := range evs {
		files.now = i
		p := evs[i].Access.Page
		if !read[p] {
			read[p] = true
			r.distinct++
			if at, ok := files.cached[p]; ok && at <= i {
				r.inTime++
			}
		}
		if _, ok := files.cached[p]; !ok {
			files.cached[p] = i
		}
		s.Process(&evs[i], func(ev *policies.Event, _ string) {
			for _, c := range ev.Tree.Children {
				predicted[c] = true
				if _, ok := files.cached[c]; !ok {
					files.cached[c] = i + lag
				}
			}
		})
	}
	for p := range predicted {
		if !read[p] {
			r.never++
		}
	}
	r.st = s.Stats()
	return r
}

// TestSQLiteLookupsReadCached builds, with the real shell, a table of
// 12 500 leaves under 127 interior pages (1 KiB pages, 100 000 rows of 100
// bytes) and scans 300 rows through its index: most lookups then meet an
// interior page the program has not read yet, which without
// Config.ReadCached bounds the prediction. With it, and a page cache
// holding what the program read and what was predicted two accesses
// before (a policy that prefetches every prediction within two reads), the
// adapter reads those interior pages once they are cached and predicts
// the leaves below them; it reads nothing that is not cached.
func TestSQLiteLookupsReadCached(t *testing.T) {
	testenv.Tool(t, "sqlite3")
	db := filepath.Join(t.TempDir(), "y.db")
	if err := sqlitedb.Build(context.Background(), sqlitedb.Config{Path: db, Layout: sqlitedb.RowidInsert, Rows: 100000, ValueSize: 100, PageSize: 1024, Seed: 3, Compressible: true}); err != nil {
		t.Fatal(err)
	}
	q, _ := sqlitedb.ScanSQL(sqlitedb.RowidInsert, sqlitedb.ByKey, 40000, 300)
	const ps = 1024
	evs := traceScanPS(t, ps, db, q)
	d := testDB{path: db, ps: ps, es: dbstatOf(t, db)}
	const lag = 2
	share := map[bool]float64{}
	for _, readCached := range []bool{false, true} {
		files := &simFiles{path: db, ps: ps, cached: map[uint64]int{}}
		s, err := NewStage(Config{PageSize: ps, ReadCached: readCached}, files)
		if err != nil {
			t.Fatal(err)
		}
		var out []derived
		for i := range evs {
			files.now = i
			for p := evs[i].Access.Page; p < evs[i].Access.Page+uint64(evs[i].Access.NPages); p++ {
				if _, ok := files.cached[p]; !ok {
					files.cached[p] = i
				}
			}
			s.Process(&evs[i], func(ev *policies.Event, name string) {
				x := *ev
				x.Tree.Children = slices.Clone(ev.Tree.Children)
				out = append(out, derived{at: i, adapter: name, ev: x})
				for _, p := range ev.Tree.Children {
					if _, ok := files.cached[p]; !ok {
						files.cached[p] = i + lag
					}
				}
			})
		}
		a := analyseLookups(d, evs, out)
		st := s.Stats()
		share[readCached] = float64(a.inTime) / float64(a.leaves)
		t.Logf("ReadCached %v: %d reads, %d table leaves, %.3f predicted in time, %d predicted never read; stats %+v", readCached, len(evs), a.leaves, share[readCached], a.never, st)
		if st.PagesIO > 4096/ps-1 || (readCached != (st.PagesCached > 0)) {
			t.Errorf("ReadCached %v: stats %+v", readCached, st)
		}
		// The index of a rowid table does not walk (noWalk): walking it
		// predicted 118 pages never read here, and 3585 on a live scan.
		if a.never > 3*DefaultAhead {
			t.Errorf("ReadCached %v: %d pages predicted never read, want at most %d", readCached, a.never, 3*DefaultAhead)
		}
		s.Close()
	}
	if share[true] < 0.9 || share[true] < share[false]+0.2 {
		t.Errorf("%.3f of the table leaves predicted in time with ReadCached, %.3f without: want at least 0.9 and 0.2 more", share[true], share[false])
	}
}

// TestOSContentCached checks cachestat on a real file: written, its pages
// are cached; dropped (POSIX_FADV_DONTNEED of its own pages), they are not.
func TestOSContentCached(t *testing.T) {
	path := writeTempFile(t, "c", make([]byte, 1<<20))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := OSContent{f}
	ok, err := c.Cached(4096, 8192)
	if errors.Is(err, ErrNotSupported) {
		t.Skip("the kernel has no cachestat (Linux 6.5)")
	}
	if err != nil || !ok {
		t.Fatalf("a file just written: cached %v, %v", ok, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Cached(4096, 8192); err != nil || ok {
		t.Errorf("after FADV_DONTNEED: cached %v, %v", ok, err)
	}
	buf := make([]byte, 100)
	if _, err := f.ReadAt(buf, 5000); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Cached(4096, 100); !ok {
		t.Error("a page just read is not cached")
	}
}

// bundleAccesses returns the accesses of a recorded bundle to the file
// named base, as accesses to file 1.
func bundleAccesses(t *testing.T, bundle, base string) []policies.Event {
	t.Helper()
	b, err := formats.Open(filepath.Join(testdata, "sqlite", bundle))
	if err != nil {
		t.Fatal(err)
	}
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	id, found := uint32(0), false
	for _, f := range files {
		if filepath.Base(f.Path) == base {
			id, found = f.ID, true
		}
	}
	if !found {
		t.Fatalf("%s has no file %s", bundle, base)
	}
	cur, err := b.Accesses()
	if err != nil {
		t.Fatal(err)
	}
	var evs []policies.Event
	for cur.Next() {
		if a := cur.At(); a.FileID == id {
			var ev policies.Event
			ev.FromAccess(a)
			ev.File = 1
			evs = append(evs, ev)
		}
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestSQLiteLookupsRecordedBundle runs the adapter on the key scan of
// rowid-insert-key.reads as predictio record saw it: the kernel's read
// accesses, with readahead and page-cache inserts mixed in, which the stage
// ignores.
func TestSQLiteLookupsRecordedBundle(t *testing.T) {
	d := openTestDB(t, "rowid-insert")
	all := bundleAccesses(t, "rowid-insert-key.bundle", "rowid-insert.db")
	out, s := run(t, Config{}, d.path, all)
	// Index derived events on the read accesses alone.
	var reads []policies.Event
	at := make([]int, len(all))
	for i, e := range all {
		at[i] = len(reads)
		if e.Access.Kind == formats.KindRead {
			reads = append(reads, e)
		}
	}
	for i := range out {
		out[i].at = at[out[i].at]
	}
	a := analyseLookups(d, reads, out)
	share := float64(a.inTime) / float64(a.leaves)
	t.Logf("%d accesses, %d reads, %d table leaves, %.3f predicted in time, %d predicted never read; stats %+v", len(all), len(reads), a.leaves, share, a.never, s.Stats())
	if len(reads) < 400 || len(all) == len(reads) {
		t.Fatalf("%d reads of %d accesses: want the scan's reads and the kernel's other rows", len(reads), len(all))
	}
	if share < 0.9 || a.never > 3*DefaultAhead || s.Stats().PagesIO != 0 {
		t.Errorf("%.3f of the table leaves predicted in time (want 0.9), %d never read, stats %+v", share, a.never, s.Stats())
	}
}

// walkOverread bounds what a scan with walks (Config.ReadCached) predicts
// and never reads: what one without them may (3 Ahead), and the lists
// (Ahead entries each) of the nodes the walks parsed ahead of its end, at
// most maxAhead, and of the one they asked for last.
const walkOverread = 3*DefaultAhead + (maxAhead+1)*DefaultAhead

// TestSQLiteWalkDeepTree scans, with the real shell, 2000 rows of a
// WITHOUT ROWID table of 1 KiB values (4 KiB pages): an index B-tree of
// fanout about 7 whose every row fills an overflow page, so a key-order
// scan reads a leaf, its 7 rows' overflow pages, then its parent's next
// row and the next leaf. The simulated page cache holds what the program
// read and what was predicted at least lag reads before. Without a walk
// the adapter predicts a leaf's overflow pages only when the program reads
// the leaf, which is too late for the first of them, and a node's children
// only when the program reads the node; with Config.ReadCached the walk
// parses the prefetched nodes ahead of the scan, across node boundaries,
// and predicts nearly every page in time. It reads nothing uncached, and
// what it predicts beyond the scan's end is bounded by the nodes it may
// parse ahead (maxAhead) and what each lists (Ahead entries).
func TestSQLiteWalkDeepTree(t *testing.T) {
	testenv.Tool(t, "sqlite3")
	testenv.Tool(t, "strace")
	db := filepath.Join(t.TempDir(), "w.db")
	if err := sqlitedb.Build(context.Background(), sqlitedb.Config{Path: db, Layout: sqlitedb.WithoutRowid, Rows: 8000, Seed: 5, Compressible: true}); err != nil {
		t.Fatal(err)
	}
	q, _ := sqlitedb.ScanSQL(sqlitedb.WithoutRowid, sqlitedb.ByKey, 3000, 2000)
	const ps, lag = 4096, 8
	evs := traceScanPS(t, ps, db, q)
	share := map[bool]float64{}
	for _, readCached := range []bool{false, true} {
		r := runCached(t, db, ps, readCached, lag, evs)
		share[readCached] = r.share()
		t.Logf("ReadCached %v: %d reads of %d pages, %.3f cached in time, %d predicted never read; stats %+v", readCached, len(evs), r.distinct, share[readCached], r.never, r.st)
		if r.st.PagesIO > 1 || readCached != (r.st.PagesCached > 0) {
			t.Errorf("ReadCached %v: the adapter read what the program had not: stats %+v", readCached, r.st)
		}
		bound := 3 * DefaultAhead
		if readCached {
			bound = walkOverread
		}
		if r.never > bound {
			t.Errorf("ReadCached %v: %d pages predicted never read, want at most %d", readCached, r.never, bound)
		}
	}
	// 0.977 with the walk from every scan step; 0.970 when an overflow
	// chain's entry did not walk (the seeded table and this scan read the
	// same pages each time).
	if share[true] < 0.974 || share[true] < share[false]+0.2 {
		t.Errorf("%.3f of the pages cached in time with the walk, %.3f without: want at least 0.974 and 0.2 more", share[true], share[false])
	}
}
