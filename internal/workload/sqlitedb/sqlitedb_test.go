package sqlitedb

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/predictio/predictio/internal/testenv"
)

func sqlite3(t *testing.T) string {
	t.Helper()
	return testenv.Tool(t, "sqlite3")
}

func query(t *testing.T, db string, args ...string) string {
	t.Helper()
	out, err := exec.Command("sqlite3", append([]string{"-batch", db}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3 %s %v: %v: %s", db, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestBuild builds each layout with the real shell and checks schema,
// rows, values, the random insertion order, and that the scan query
// returns the rows asked for.
func TestBuild(t *testing.T) {
	sqlite3(t)
	for _, c := range []struct {
		layout Layout
		schema string
		by     []Scan
	}{
		{WithoutRowid, "WITHOUT ROWID", []Scan{ByKey}},
		{Rowid, "id INTEGER PRIMARY KEY", []Scan{ByKey, ByRowid}},
		{RowidInsert, "ycsb_key TEXT PRIMARY KEY, field0 BLOB)", []Scan{ByKey}},
	} {
		t.Run(string(c.layout), func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "y.db")
			if err := Build(context.Background(), Config{Path: db, Layout: c.layout, Rows: 400, Seed: 3}); err != nil {
				t.Fatal(err)
			}
			if s := query(t, db, "SELECT sql FROM sqlite_schema WHERE name = 'usertable'"); !strings.Contains(s, c.schema) {
				t.Errorf("schema %q lacks %q", s, c.schema)
			}
			if s := query(t, db, "SELECT count(*), min(length(field0)), max(length(field0)), count(DISTINCT ycsb_key), min(ycsb_key), max(ycsb_key) FROM usertable"); s != "400|1024|1024|400|user0000000000|user0000000399" {
				t.Errorf("rows: %s", s)
			}
			// Random order: rows of consecutive keys are not stored in
			// key order in the table's leaves (the rowid layouts store by
			// rowid; rowid-insert's rowids follow insertion).
			if c.layout == RowidInsert {
				ids := query(t, db, "SELECT group_concat(rowid) FROM (SELECT rowid FROM usertable ORDER BY ycsb_key LIMIT 20)")
				if ids == "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20" {
					t.Error("rowids follow the key order: rows were not inserted in random order")
				}
			}
			for _, by := range c.by {
				q, err := ScanSQL(c.layout, by, 100, 50)
				if err != nil {
					t.Fatal(err)
				}
				args := ScanArgs("", db, q)
				out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
				if err != nil {
					t.Fatalf("%v: %v: %s", args, err, out)
				}
				if !strings.HasSuffix(strings.TrimSpace(string(out)), "50|51200") {
					t.Errorf("scan by %s: %q, want 50 rows of 1024 bytes", by, out)
				}
			}
			if err := Build(context.Background(), Config{Path: db, Layout: c.layout, Rows: 1}); err == nil || !strings.Contains(err.Error(), "exists") {
				t.Errorf("building over an existing file: %v", err)
			}
		})
	}
	if _, err := ScanSQL(WithoutRowid, ByRowid, 0, 1); err == nil {
		t.Error("a rowid scan of a WITHOUT ROWID table was accepted")
	}
	if err := Build(context.Background(), Config{Path: "x", Layout: "btree"}); err == nil || !strings.Contains(err.Error(), "valid: without-rowid, rowid, rowid-insert") {
		t.Errorf("bad layout: %v", err)
	}
}

// TestRandomOrder checks that the WITHOUT ROWID table's leaves, in key
// order, are scattered through the file (dbstat), as random inserts leave
// them, and that the build is deterministic.
func TestRandomOrder(t *testing.T) {
	sqlite3(t)
	dir := t.TempDir()
	var sums []string
	for i := range 2 {
		db := filepath.Join(dir, fmt.Sprintf("y%d.db", i))
		if err := Build(context.Background(), Config{Path: db, Layout: WithoutRowid, Rows: 600, Seed: 9, Compressible: i == 1}); err != nil {
			t.Fatal(err)
		}
		leaves := strings.Split(query(t, db, "SELECT group_concat(pageno) FROM (SELECT pageno FROM dbstat WHERE name='usertable' AND pagetype='leaf' ORDER BY path)"), ",")
		var pages []int
		for _, l := range leaves {
			p, _ := strconv.Atoi(l)
			pages = append(pages, p)
		}
		if len(pages) < 20 || slices.IsSorted(pages) {
			t.Errorf("%d leaves, in file order: %v", len(pages), pages)
		}
		sums = append(sums, query(t, db, "SELECT group_concat(pageno) FROM (SELECT pageno FROM dbstat ORDER BY name, path)"))
	}
	if sums[0] != sums[1] {
		t.Error("the page layout depends on the values, not only on sizes and order")
	}
	if p := Order(1000, 5); len(p) != 1000 || slices.Equal(p, Order(1000, 6)) || !slices.Equal(p, Order(1000, 5)) {
		t.Error("Order is not a seeded permutation")
	}
}

func TestParseStrace(t *testing.T) {
	in := `openat(AT_FDCWD, "/x/y.db", O_RDONLY|O_CLOEXEC) = 3
openat(AT_FDCWD, "/x/y.db", O_RDWR|O_CREAT|O_NOFOLLOW|O_CLOEXEC, 0644) = 4
pread64(4, "SQLite format 3\0\20\0\1\1\0@  \0\0\0\2\0\0\4\0"..., 100, 0) = 100
pread64(3, "zz"..., 100, 0) = 100
1234  pread64(4, "\r\0\0\0\1\17\2"..., 4096, 8192) = 4096
lseek(4, 12288, SEEK_SET)               = 12288
read(4, "\n\0"..., 4096)                = 4096
read(4, "", 4096)                       = 0
openat(AT_FDCWD, "/x/other", O_RDONLY) = 4
pread64(4, "q"..., 4096, 0) = 4096
`
	got, err := ParseStrace(strings.NewReader(in), "/x/y.db")
	if err != nil {
		t.Fatal(err)
	}
	want := []Read{{0, 100}, {8192, 4096}, {12288, 4096}}
	if !slices.Equal(got, want) {
		t.Errorf("reads %v, want %v", got, want)
	}
	if _, err := ParseStrace(strings.NewReader(in), "/x/z.db"); err == nil || !strings.Contains(err.Error(), "/x/z.db is never opened") {
		t.Errorf("a file never opened: %v", err)
	}
}

// TestTraceReads traces the real shell: a key scan of the rowid-insert
// layout reads the header, index pages and table pages, page-sized and
// page-aligned; a covering scan reads fewer pages than the same scan
// that looks rows up; point lookups run in one connection.
func TestTraceReads(t *testing.T) {
	sqlite3(t)
	db := filepath.Join(t.TempDir(), "y.db")
	if err := Build(context.Background(), Config{Path: db, Layout: RowidInsert, Rows: 2000, Seed: 3, Compressible: true}); err != nil {
		t.Fatal(err)
	}
	q, _ := ScanSQL(RowidInsert, ByKey, 100, 300)
	scan, err := TraceReads(context.Background(), ScanArgs("", db, q), db)
	if err != nil {
		t.Fatal(err)
	}
	// 300 rows in random rows of 667 leaves: most lookups read a leaf
	// (SQLite's page cache holds the others).
	if len(scan) < 200 || scan[0] != (Read{0, 100}) {
		t.Fatalf("%d reads, first %v: want the header and a read for most rows looked up", len(scan), scan[:min(len(scan), 3)])
	}
	for _, r := range scan[1:] {
		if r.Len == 4096 && r.Off%4096 != 0 {
			t.Errorf("read %v is not page aligned", r)
		}
	}
	covering, err := TraceReads(context.Background(), ScanArgs("", db, CoveringSQL(100, 300)), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(covering) >= len(scan)/10 {
		t.Errorf("the covering scan read %d times, the scan with lookups %d", len(covering), len(scan))
	}
	desc, err := TraceReads(context.Background(), ScanArgs("", db, ScanDescSQL(1000, 300)), db)
	if err != nil || len(desc) < 200 {
		t.Errorf("descending scan: %d reads, %v", len(desc), err)
	}
	points, err := TraceReads(context.Background(), ScanArgs("", db, PointSQL(5), PointSQL(1500), PointSQL(700)), db)
	if err != nil || len(points) < 6 || len(points) > 30 {
		t.Errorf("three point lookups: %d reads, %v", len(points), err)
	}
}
