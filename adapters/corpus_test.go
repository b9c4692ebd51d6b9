package adapters

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// lookupsDB is a database of 512-byte pages with a schema (page 1: a
// rowid table t rooted at page 2 and its automatic index at page 3), a
// table interior page (2) over two leaves (6, 7; row 2 spills to overflow
// page 8) and an index interior page (3) over two leaves (4, 5) whose cell
// holds row 3: an index scan of t looks rows 1, 3, 2, 4 up.
func lookupsDB() []byte {
	const ps = 512
	pages := make([][]byte, 8)
	for i := range pages {
		pages[i] = make([]byte, ps)
	}
	be := binary.BigEndian
	h := pages[0]
	copy(h, sqliteMagic)
	be.PutUint16(h[16:], ps)
	h[18], h[19], h[21], h[22], h[23] = 1, 1, 64, 32, 32
	be.PutUint32(h[28:], 8)
	be.PutUint32(h[56:], 1) // UTF-8
	schemaRow := func(rowid byte, typ, name, tbl string, root byte, sql string) []byte {
		st := uint64(0)
		if sql != "" {
			st = text(sql)
		}
		rec := makeRecord([]uint64{text(typ), text(name), text(tbl), 1, st}, []byte(typ), []byte(name), []byte(tbl), []byte{root}, []byte(sql))
		return append(appendVarint(appendVarint(nil, uint64(len(rec))), uint64(rowid)), rec...)
	}
	// Page 1's B-tree header follows the database header.
	p1 := btreePageAt(ps, 100, sqliteTableLeaf, 0, [][]byte{
		schemaRow(1, "table", "t", "t", 2, "CREATE TABLE t(k TEXT PRIMARY KEY, v)"),
		schemaRow(2, "index", "sqlite_autoindex_t_1", "t", 3, ""),
	})
	copy(h[100:], p1[100:])
	indexCell := func(key string, rowid byte) []byte {
		rec := makeRecord([]uint64{text(key), 1}, []byte(key), []byte{rowid})
		return append(appendVarint(nil, uint64(len(rec))), rec...)
	}
	row := func(rowid byte, size int) []byte {
		rec := makeRecord([]uint64{text("k"), uint64(12 + 2*size)}, []byte("k"), make([]byte, size))
		c := appendVarint(appendVarint(nil, uint64(len(rec))), uint64(rowid))
		if len(rec) <= ps-35 {
			return append(c, rec...)
		}
		// usable 512: M = 39, K = 39 + (P-39) % 508 stays local.
		local := 39 + (len(rec)-39)%508
		c = append(c, rec[:local]...)
		return be.AppendUint32(c, 8)
	}
	copy(pages[1], btreePage(ps, sqliteTableInterior, 7, [][]byte{tableInteriorCell(6, 2)}))
	copy(pages[2], btreePage(ps, sqliteIndexInterior, 5, [][]byte{append(be.AppendUint32(nil, 4), indexCell("b", 3)...)}))
	copy(pages[3], btreePage(ps, sqliteIndexLeaf, 0, [][]byte{indexCell("a", 1)}))
	copy(pages[4], btreePage(ps, sqliteIndexLeaf, 0, [][]byte{indexCell("c", 2), indexCell("d", 4)}))
	copy(pages[5], btreePage(ps, sqliteTableLeaf, 0, [][]byte{row(1, 20), row(2, 560)}))
	copy(pages[6], btreePage(ps, sqliteTableLeaf, 0, [][]byte{row(3, 20), row(4, 20)}))
	var db []byte
	for _, p := range pages {
		db = append(db, p...)
	}
	return db
}

func writeCorpus(t *testing.T, target, name string, data, pattern []byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	s := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n[]byte(" + strconv.Quote(string(pattern)) + ")\n"
	path := filepath.Join(dir, name)
	if os.Getenv("PREDICTIO_WRITE_FUZZ_CORPUS") != "1" {
		if b, err := os.ReadFile(path); err != nil || string(b) != s {
			t.Errorf("%s differs from what its generator writes (%v): run PREDICTIO_WRITE_FUZZ_CORPUS=1 go test -run TestFuzzCorpus ./adapters and commit it", path, err)
		}
		return
	}
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFuzzCorpus checks the hand-made seeds of adapters/testdata/fuzz
// against their generator, and with PREDICTIO_WRITE_FUZZ_CORPUS=1 rewrites
// them: small files that exercise each adapter's structures (a SQLite
// database of 512-byte pages with interior and leaf pages, overflow chains
// and bad pointers; an LMDB environment of 512-byte pages with a branch,
// leaves and an overflow run; GGUF headers in both byte orders).
func TestFuzzCorpus(t *testing.T) {
	// SQLite, 512-byte pages: header page, an index interior page (2), two
	// index leaves (3, 4) whose cells spill to overflow pages 5 and 6, and
	// a table interior page (7) whose children include itself and page 99.
	const ps = 512
	pages := make([][]byte, 7)
	for i := range pages {
		pages[i] = make([]byte, ps)
	}
	h := pages[0]
	copy(h, sqliteMagic)
	binary.BigEndian.PutUint16(h[16:], ps)
	h[18], h[19], h[21], h[22], h[23] = 1, 1, 64, 32, 32
	binary.BigEndian.PutUint32(h[28:], 7)
	// usable 512: index X = (500*64/255)-23 = 102, M = (500*32/255)-23 = 39
	spill := func(ovf uint32) []byte {
		c := []byte{0x81, 0x00} // payload 128 > X: 39 stay local
		c = append(c, make([]byte, 39)...)
		return binary.BigEndian.AppendUint32(c, ovf)
	}
	interior := func(child, ovf uint32) []byte {
		return append(binary.BigEndian.AppendUint32(nil, child), spill(ovf)...)
	}
	copy(pages[1], btreePage(ps, sqliteIndexInterior, 4, [][]byte{interior(3, 6)}))
	copy(pages[2], btreePage(ps, sqliteIndexLeaf, 0, [][]byte{spill(5)}))
	copy(pages[3], btreePage(ps, sqliteIndexLeaf, 0, [][]byte{spill(6), spill(5)}))
	binary.BigEndian.PutUint32(pages[4], 6) // 5 -> 6
	copy(pages[6], btreePage(ps, sqliteTableInterior, 99, [][]byte{tableInteriorCell(7, 1), tableInteriorCell(3, 2)}))
	var db []byte
	for _, p := range pages {
		db = append(db, p...)
	}
	writeCorpus(t, "FuzzSQLite", "btree-512", db, []byte{0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0x10, 5, 0x20, 6})
	writeCorpus(t, "FuzzSQLite", "lookups-512", lookupsDB(), []byte{0, 0, 0, 3, 0, 6, 0, 7, 0, 5, 0, 6, 0, 7, 0, 8, 0, 1})

	// LMDB, 512-byte pages: meta 0 and 1, a branch (2) over leaves 3 and
	// 4, leaf 4 holding a big value in overflow pages 5-6.
	const lp = 512
	le := binary.LittleEndian
	env := make([]byte, 7*lp)
	for m := 0; m < 2; m++ {
		pg := env[m*lp:]
		le.PutUint64(pg, uint64(m))
		le.PutUint16(pg[10:], lmdbMeta)
		le.PutUint32(pg[16:], lmdbMagic)
		le.PutUint32(pg[20:], 1)
		le.PutUint32(pg[40:], lp)
		le.PutUint64(pg[88+40:], 2)
		le.PutUint64(pg[144:], uint64(m+1))
	}
	node := func(pg []byte, i, off int, lo, hi, fl uint16, key string, data []byte) {
		le.PutUint16(pg[16+2*i:], uint16(off))
		le.PutUint16(pg[off:], lo)
		le.PutUint16(pg[off+2:], hi)
		le.PutUint16(pg[off+4:], fl)
		le.PutUint16(pg[off+6:], uint16(len(key)))
		copy(pg[off+8:], key)
		copy(pg[off+8+len(key):], data)
	}
	br := env[2*lp:]
	le.PutUint64(br, 2)
	le.PutUint16(br[10:], lmdbBranch)
	node(br, 0, 480, 3, 0, 0, "", nil)
	node(br, 1, 460, 4, 0, 0, "k5", nil)
	le.PutUint16(br[12:], 16+4)
	le.PutUint16(br[14:], 460)
	for _, p := range []int{3, 4} {
		lf := env[p*lp:]
		le.PutUint64(lf, uint64(p))
		le.PutUint16(lf[10:], lmdbLeaf)
		if p == 3 {
			node(lf, 0, 480, 2, 0, 0, "k1", []byte("v1"))
		} else {
			node(lf, 0, 470, 700, 0, lmdbBigData, "k5", le.AppendUint64(nil, 5))
		}
		le.PutUint16(lf[12:], 16+2)
		le.PutUint16(lf[14:], 470)
	}
	ov := env[5*lp:]
	le.PutUint64(ov, 5)
	le.PutUint16(ov[10:], lmdbOverflow)
	le.PutUint32(ov[12:], 2)
	writeCorpus(t, "FuzzLMDB", "tree-512", env, []byte{0, 0, 0, 1, 0x10, 2, 0x10, 3, 0x20, 4, 0x10, 5})

	// GGUF: the small test model, little- and big-endian, header only.
	for _, c := range []struct {
		name string
		bo   binary.AppendByteOrder
	}{{"small-le", binary.LittleEndian}, {"small-be", binary.BigEndian}} {
		b := &ggufBuilder{bo: c.bo}
		b.kvU32("general.alignment", 64)
		writeCorpus(t, "FuzzGGUF", c.name, b.file(3, smallModel(b), 64, false), []byte{0, 0, 0x40, 1})
	}
}
