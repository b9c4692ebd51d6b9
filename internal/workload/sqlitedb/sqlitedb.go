// Package sqlitedb builds YCSB-style SQLite databases with the unmodified
// sqlite3 command-line shell, and gives the range-scan queries that the
// adapter tests, the measurement phase and `predictio eval` run on them.
//
// Rows are keyed "user%010d" and inserted in a random order (a seeded
// permutation), so the B-tree pages of neighbouring keys are scattered
// through the file as in a database filled by random inserts.
package sqlitedb

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
)

// Layout is the schema of the table.
type Layout string

const (
	// WithoutRowid is usertable(ycsb_key TEXT PRIMARY KEY, field0 BLOB)
	// WITHOUT ROWID: an index B-tree, where 1 KiB values overflow (an index
	// cell keeps at most about 1002 bytes of a 4 KiB page).
	WithoutRowid Layout = "without-rowid"
	// Rowid is usertable(id INTEGER PRIMARY KEY, ycsb_key TEXT, field0
	// BLOB) with the index usertable_key on ycsb_key, created before the
	// rows: a table B-tree, where 1 KiB rows stay in the leaf (up to about
	// 4061 bytes do), plus an index B-tree. Row i has rowid i and key
	// Key(i), so a scan by key looks rows up in rowid order.
	Rowid Layout = "rowid"
	// RowidInsert is usertable(ycsb_key TEXT PRIMARY KEY, field0 BLOB), a
	// rowid table whose key is an automatic index and whose rowids are
	// assigned in insertion order, as YCSB's JDBC schema gives: a scan by
	// key walks the index and looks rows up in random rowid order.
	RowidInsert Layout = "rowid-insert"
)

// Default row counts: each gives a database of more than 1 GB.
const (
	DefaultRowsWithoutRowid = 400_000 // about 1.9 GB: every row also fills an overflow page
	DefaultRowsRowid        = 1_000_000
	DefaultValueSize        = 1024
)

// Config describes a database to build.
type Config struct {
	Path   string // the database file; it must not exist
	Layout Layout
	// Rows is the number of rows; 0 means the layout's default.
	Rows int
	// ValueSize is field0's size in bytes; 0 means DefaultValueSize.
	ValueSize int
	// Seed seeds the insertion order and the values.
	Seed uint64
	// Compressible fills values with a repeated pattern instead of random
	// bytes, so a small test database compresses well. The page layout is
	// the same: it depends on sizes and order only.
	Compressible bool
	// PageSize is the database page size; 0 means 4096.
	PageSize int
	// SQLite is the sqlite3 shell to run; "" means "sqlite3" from PATH.
	SQLite string
}

func (c *Config) fill() error {
	switch c.Layout {
	case WithoutRowid:
		if c.Rows == 0 {
			c.Rows = DefaultRowsWithoutRowid
		}
	case Rowid, RowidInsert:
		if c.Rows == 0 {
			c.Rows = DefaultRowsRowid
		}
	default:
		return fmt.Errorf("build sqlite database: layout %q; valid: %s, %s, %s", c.Layout, WithoutRowid, Rowid, RowidInsert)
	}
	if c.Rows < 0 || c.Rows > 1e10 {
		return fmt.Errorf("build sqlite database: rows %d out of range", c.Rows)
	}
	if c.ValueSize == 0 {
		c.ValueSize = DefaultValueSize
	}
	if c.PageSize == 0 {
		c.PageSize = 4096
	}
	if c.SQLite == "" {
		c.SQLite = "sqlite3"
	}
	if c.Path == "" {
		return errors.New("build sqlite database: no path")
	}
	return nil
}

// Key returns the key of row i.
func Key(i int) string { return fmt.Sprintf("user%010d", i) }

// Order returns the insertion order of rows 0..n-1 for seed.
func Order(n int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	return r.Perm(n)
}

// Build creates the database by piping SQL into the sqlite3 shell.
func Build(ctx context.Context, cfg Config) error {
	if err := cfg.fill(); err != nil {
		return err
	}
	if _, err := os.Stat(cfg.Path); err == nil {
		return fmt.Errorf("build sqlite database: %s exists; remove it first", cfg.Path)
	}
	cmd := exec.CommandContext(ctx, cfg.SQLite, "-batch", cfg.Path)
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("build sqlite database: %w", err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("build sqlite database: start %s: %w", cfg.SQLite, err)
	}
	werr := writeSQL(in, &cfg)
	in.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("build sqlite database %s: %s: %w: %s", cfg.Path, cfg.SQLite, err, strings.TrimSpace(stderr.String()))
	}
	if werr != nil {
		return fmt.Errorf("build sqlite database %s: write SQL: %w", cfg.Path, werr)
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		return fmt.Errorf("build sqlite database %s: %s", cfg.Path, s)
	}
	return nil
}

// writeSQL writes the statements that create and fill the table.
func writeSQL(w io.Writer, cfg *Config) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	fmt.Fprintf(bw, "PRAGMA page_size=%d;\nPRAGMA journal_mode=OFF;\nPRAGMA synchronous=OFF;\nPRAGMA cache_size=-262144;\n", cfg.PageSize)
	switch cfg.Layout {
	case WithoutRowid:
		bw.WriteString("CREATE TABLE usertable(ycsb_key TEXT PRIMARY KEY, field0 BLOB) WITHOUT ROWID;\n")
	case Rowid:
		bw.WriteString("CREATE TABLE usertable(id INTEGER PRIMARY KEY, ycsb_key TEXT, field0 BLOB);\n")
		bw.WriteString("CREATE INDEX usertable_key ON usertable(ycsb_key);\n")
	case RowidInsert:
		bw.WriteString("CREATE TABLE usertable(ycsb_key TEXT PRIMARY KEY, field0 BLOB);\n")
	}
	bw.WriteString("BEGIN;\n")
	vr := rand.New(rand.NewPCG(cfg.Seed^0x9e3779b97f4a7c15, cfg.Seed))
	val := make([]byte, cfg.ValueSize)
	hexv := make([]byte, 2*cfg.ValueSize)
	const batch = 64
	for n, i := range Order(cfg.Rows, cfg.Seed) {
		if n%batch == 0 {
			if n > 0 {
				bw.WriteString(";\n")
			}
			bw.WriteString("INSERT INTO usertable VALUES ")
		} else {
			bw.WriteString(",")
		}
		fillValue(val, vr, i, cfg.Compressible)
		hex.Encode(hexv, val)
		switch cfg.Layout {
		case WithoutRowid, RowidInsert:
			fmt.Fprintf(bw, "('%s',X'%s')", Key(i), hexv)
		case Rowid:
			fmt.Fprintf(bw, "(%d,'%s',X'%s')", i, Key(i), hexv)
		}
	}
	if cfg.Rows > 0 {
		bw.WriteString(";\n")
	}
	bw.WriteString("COMMIT;\n")
	return bw.Flush()
}

func fillValue(b []byte, r *rand.Rand, row int, compressible bool) {
	if !compressible {
		for i := 0; i < len(b); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < len(b); j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		return
	}
	for i := range b {
		b[i] = byte('a' + (row+i/64)%26)
	}
}

// Scan names a range-scan query.
type Scan string

const (
	// ByKey scans rows in key order: the WITHOUT ROWID table's own
	// B-tree, or a rowid table's index and a lookup per row.
	ByKey Scan = "key"
	// ByRowid scans the rowid table in rowid order (its table B-tree).
	ByRowid Scan = "rowid"
)

// Pragmas are the settings of the measured scans: no mmap and a small
// page cache (2 MiB), as in the workload.
var Pragmas = []string{"PRAGMA mmap_size=0", "PRAGMA cache_size=-2048"}

// ScanSQL returns a query that reads n rows, values included, from row
// start on.
func ScanSQL(layout Layout, by Scan, start, n int) (string, error) {
	switch {
	case by == ByKey:
		return fmt.Sprintf("SELECT count(*), sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE ycsb_key >= '%s' ORDER BY ycsb_key LIMIT %d)", Key(start), n), nil
	case by == ByRowid && layout == Rowid:
		return fmt.Sprintf("SELECT count(*), sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE id >= %d ORDER BY id LIMIT %d)", start, n), nil
	}
	return "", fmt.Errorf("scan sqlite database: scan %q on layout %q; valid: key on every layout, rowid on %s", by, layout, Rowid)
}

// ScanDescSQL returns a query that reads n rows, values included, in
// descending key order from row start down.
func ScanDescSQL(start, n int) string {
	return fmt.Sprintf("SELECT count(*), sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE ycsb_key <= '%s' ORDER BY ycsb_key DESC LIMIT %d)", Key(start), n)
}

// CoveringSQL returns a query that reads n keys from row start on and no
// values: on the rowid layouts a scan of the index alone (a covering
// index), which looks up no table rows.
func CoveringSQL(start, n int) string {
	return fmt.Sprintf("SELECT count(*) FROM (SELECT ycsb_key FROM usertable WHERE ycsb_key >= '%s' ORDER BY ycsb_key LIMIT %d)", Key(start), n)
}

// PointSQL returns a query that reads row i's value by its key.
func PointSQL(i int) string {
	return fmt.Sprintf("SELECT length(field0) FROM usertable WHERE ycsb_key = '%s'", Key(i))
}

// ScanArgs returns the argument vector that runs query with Pragmas on
// the database at path: sqlite3 executes each argument in turn.
// More queries may follow; they run in one connection, in order.
func ScanArgs(sqlite, path, query string, more ...string) []string {
	if sqlite == "" {
		sqlite = "sqlite3"
	}
	return append(append(append([]string{sqlite, "-batch", path}, Pragmas...), query), more...)
}
