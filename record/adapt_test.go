package record

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/tracetest"
	"github.com/predictio/predictio/internal/workload/sqlitedb"
	"github.com/predictio/predictio/simulate"
)

// sqliteDB builds a WITHOUT ROWID database of rows 1 KiB rows inserted in
// random key order with the sqlite3 shell, and returns its path and the
// OS pages (4 KiB) of its leaf and overflow pages, from SQLite's own dbstat.
func sqliteDB(t *testing.T, rows int) (string, map[uint64]string) {
	t.Helper()
	sqlite, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("no sqlite3 on PATH (Debian package sqlite3)")
	}
	db := filepath.Join(tracetest.DiskDir(t), "scan.db")
	if err := sqlitedb.Build(context.Background(), sqlitedb.Config{Path: db, Layout: sqlitedb.WithoutRowid, Rows: rows, Seed: 11, Compressible: true, SQLite: sqlite}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sqlite, "-batch", db, "SELECT pageno, pagetype FROM dbstat WHERE name = 'usertable'").Output()
	if err != nil {
		t.Skipf("sqlite3 has no dbstat table: %v", err)
	}
	pages := map[uint64]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		no, typ, _ := strings.Cut(l, "|")
		n, err := strconv.ParseUint(no, 10, 64)
		if err != nil {
			t.Fatalf("dbstat line %q", l)
		}
		if typ == "leaf" || typ == "overflow" {
			pages[n-1] = typ // 4 KiB database pages: page n is OS page n-1
		}
	}
	return db, pages
}

// TestAdaptersSQLiteScan records the unmodified sqlite3 shell running a
// range scan of 1000 rows over a WITHOUT ROWID table and checks the hints
// the sqlite adapter derived at record time: they are in hints.arrow with
// source adapter:sqlite and the reading thread, the manifest names the
// adapters, at least 0.8 of the leaf and overflow pages the scan read were
// named by a hint stamped before the read began, and simulating the
// bundle with the tree policy misses fewer pages than the readahead
// baseline. With --adapters none the bundle has no such hints.
func TestAdaptersSQLiteScan(t *testing.T) {
	requireRecorder(t)
	db, scanPages := sqliteDB(t, 3000)
	q, err := sqlitedb.ScanSQL(sqlitedb.WithoutRowid, sqlitedb.ByKey, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	cmd := sqlitedb.ScanArgs("sqlite3", db, q)
	tracetest.Evict(t, db)
	r := record(t, context.Background(), Config{Command: cmd, Include: []string{filepath.Dir(db)}})
	if !slices.Equal(r.man.Recording.Adapters, adapters.Names()) {
		t.Errorf("manifest recording.adapters = %q, want %q", r.man.Recording.Adapters, adapters.Names())
	}
	id := r.fileID(t, db)
	var derived []formats.Hint
	for _, h := range r.hints {
		if h.Source == adapters.Source(adapters.SQLite) && h.FileID == id {
			derived = append(derived, h)
		}
	}
	if len(derived) == 0 {
		t.Fatalf("no adapter:sqlite hints in the bundle (%d hints; adapters %+v)", len(r.hints), r.sum.Adapters)
	}
	for _, h := range derived {
		if h.TID == 0 || h.PID == 0 || h.Kind != formats.HintTreeChildEnter {
			t.Fatalf("derived hint %+v: want a TreeChildEnter with the reading pid and tid", h)
		}
	}
	if r.man.Counters.Hints != uint64(len(r.hints)) {
		t.Errorf("manifest counters.hints %d, hints.arrow has %d", r.man.Counters.Hints, len(r.hints))
	}

	// In time: a hint stamped before the read's start named the page.
	predicted := map[uint64]uint64{} // page -> first hint's ts
	for _, h := range derived {
		for _, p := range h.Children {
			if _, ok := predicted[p]; !ok {
				predicted[p] = h.TS
			}
		}
	}
	read := map[uint64]bool{}
	inTime := 0
	for _, a := range r.rowsOf(id, formats.KindRead) {
		for p := a.FirstPage; p < a.FirstPage+uint64(a.NPages); p++ {
			if _, scan := scanPages[p]; !scan || read[p] {
				continue
			}
			read[p] = true
			if ts, ok := predicted[p]; ok && ts < a.TS {
				inTime++
			}
		}
	}
	frac := float64(inTime) / float64(max(len(read), 1))
	t.Logf("%d hints derived, %d leaf and overflow pages read, %.3f predicted before their read; adapters %+v", len(derived), len(read), frac, r.sum.Adapters)
	if len(read) < 1000 {
		t.Fatalf("the scan read %d leaf and overflow pages, want at least 1000 (one overflow page per row)", len(read))
	}
	if frac < 0.8 {
		t.Errorf("%.3f of the scan's leaf and overflow pages were predicted before they were read, want at least 0.8", frac)
	}
	if r.sum.Adapters.PagesIO != 0 {
		t.Errorf("the adapter read %d pages the program had not read", r.sum.Adapters.PagesIO)
	}

	// simulate --policy tree on the bundle.
	base, tree := simulateTree(t, r.dir)
	t.Logf("simulate: baseline %d misses, tree %d misses (%d prefetched, %d used in time)", base.Misses, tree.Misses, tree.Prefetched, tree.Used)
	if tree.Misses >= base.Misses {
		t.Errorf("simulate --policy tree: %d misses, baseline %d: want fewer", tree.Misses, base.Misses)
	}

	// Without the adapters: no derived hints.
	tracetest.Evict(t, db)
	none := record(t, context.Background(), Config{Command: cmd, Include: []string{filepath.Dir(db)}, Adapters: []string{}})
	for _, h := range none.hints {
		if strings.HasPrefix(h.Source, formats.HintSourceAdapter) {
			t.Fatalf("--adapters none: hint %+v", h)
		}
	}
	if len(none.man.Recording.Adapters) != 0 {
		t.Errorf("--adapters none: manifest recording.adapters = %q", none.man.Recording.Adapters)
	}
}

// simulateTree simulates the bundle in dir with the tree policy on an
// NVMe model and returns the baseline's and the tree lane's stats.
func simulateTree(t *testing.T, dir string) (base, tree simulate.Stats) {
	t.Helper()
	in, err := simulate.OpenInput(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dev, err := simulate.Preset("nvme")
	if err != nil {
		t.Fatal(err)
	}
	src, err := in.Source()
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rep, err := simulate.Run(simulate.Config{PageSize: in.PageSize, CacheBytes: 256 << 20, Device: dev, Env: in.Env(), Policies: []string{"tree"}}, src)
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Lane("tree")
	if l == nil {
		t.Fatalf("no tree lane in %+v", rep.Policies)
	}
	return rep.Policies[0], *l
}

// TestAdaptersSkipWholeReads: a file whose first access read all of it is
// not opened for the adapters (nothing of it is left to predict), while a
// file read only in part is: cat of a 10 KiB file leaves the adapters'
// counters at zero, head -c 1 of a 1 MiB file has its header read once.
func TestAdaptersSkipWholeReads(t *testing.T) {
	requireRecorder(t)
	dir := tracetest.DiskDir(t)
	small, big := filepath.Join(dir, "small"), filepath.Join(dir, "big")
	if err := os.WriteFile(small, make([]byte, 10<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  []string
		want uint64 // files whose header the adapters read
	}{{[]string{"cat", small}, 0}, {[]string{"head", "-c", "1", big}, 1}} {
		r := record(t, context.Background(), Config{Command: c.cmd, Include: []string{dir}})
		st := r.sum.Adapters
		if got := st.Recognized + st.Unrecognized + st.OpenErrors; got != c.want {
			t.Errorf("%q: the adapters opened %d files (%+v), want %d", c.cmd, got, st, c.want)
		}
	}
}
