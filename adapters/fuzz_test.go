package adapters

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// memContent is a file held in memory.
type memContent []byte

func (m memContent) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(m)) {
		return 0, io.EOF
	}
	n := copy(p, m[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (m memContent) Size() int64  { return int64(len(m)) }
func (m memContent) Close() error { return nil }

// Cached reports every byte of the file cached, so that the adapters'
// reads of cached pages (Config.ReadCached) are fuzzed too.
func (m memContent) Cached(off, n int64) (bool, error) {
	return off >= 0 && n >= 0 && off+n <= int64(len(m)), nil
}

type memFiles struct{ data []byte }

func (m memFiles) Open(uint32, uint32) (Content, error) { return memContent(m.data), nil }

// fuzzStage runs a stage with one adapter over file data: every page read
// in order, then the accesses pattern names (two bytes a page number, the
// kind from the first), then the whole run again. It checks that derived
// events are well formed; a panic, a hang or a runaway allocation fails the
// fuzzer by itself.
func fuzzStage(t *testing.T, adapter string, data, pattern []byte, confirm int) {
	s, err := NewStage(Config{Adapters: []string{adapter}, Confirm: confirm, TensorAhead: 1 << 16, ReadCached: true}, memFiles{data})
	if err != nil {
		t.Fatal(err)
	}
	pages := uint64(len(data)+4095) / 4096
	check := func(ev *policies.Event, name string) {
		if name != adapter {
			t.Fatalf("event from %s", name)
		}
		switch ev.Kind {
		case policies.EventTreeChildEnter:
			if n := len(ev.Tree.Children); n == 0 || n > MaxHintChildren {
				t.Fatalf("%d children", n)
			}
		case policies.EventTensorLayout:
			if len(ev.Tensor.Name) >= ggufMaxName {
				t.Fatalf("tensor name %q", ev.Tensor.Name)
			}
		default:
			t.Fatalf("event kind %v", ev.Kind)
		}
	}
	kinds := []formats.AccessKind{formats.KindRead, formats.KindFault, formats.KindMap}
	ev := policies.Event{Kind: policies.EventFileAccess, File: 1, PID: 1}
	for round := 0; round < 2; round++ {
		for p := uint64(0); p < pages && p < 256; p++ {
			ev.TS++
			ev.Access = policies.FileAccess{Kind: formats.KindRead, Page: p, NPages: 1}
			s.Process(&ev, check)
		}
		for i := 0; i+1 < len(pattern); i += 2 {
			ev.TS++
			n := uint32(pattern[i]>>6) + 1
			ev.Access = policies.FileAccess{Kind: kinds[int(pattern[i]>>4&3)%3], Page: uint64(pattern[i+1]) % (pages + 2), NPages: n}
			s.Process(&ev, check)
		}
	}
	s.Status()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func prefix(t testing.TB, name string, n int) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if filepath.Ext(name) == ".gz" {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// seqPattern names pages 0..n-1 in order, as reads.
func seqPattern(n int) []byte {
	var p []byte
	for i := range n {
		p = append(p, 0, byte(i))
	}
	return p
}

// FuzzSQLite runs the SQLite adapter on arbitrary files and accesses.
// Run: go test -fuzz FuzzSQLite -fuzztime 60s -fuzzminimizetime 2s ./adapters
func FuzzSQLite(f *testing.F) {
	f.Add(prefix(f, "sqlite/without-rowid.db.gz", 64<<10), seqPattern(16))
	f.Add(prefix(f, "sqlite/rowid.db.gz", 48<<10), []byte{0, 1, 0, 4, 0, 5, 0x10, 6, 0x20, 7})
	f.Add(prefix(f, "sqlite/without-rowid-1k.db.gz", 32<<10), seqPattern(8))
	f.Add(prefix(f, "sqlite/rowid-insert.db.gz", 64<<10), seqPattern(16))
	f.Add(prefix(f, "sqlite/rowid-insert-1k.db.gz", 16<<10), []byte{0, 0, 0, 2, 0, 1, 0, 3, 0, 9, 0, 12})
	f.Add(lookupsDB(), []byte{0, 0, 0, 3, 0, 6, 0, 7, 0, 5, 0, 6})
	f.Fuzz(func(t *testing.T, data, pattern []byte) {
		fuzzStage(t, SQLite, data, pattern, 0)
		fuzzStage(t, SQLite, data, pattern, -1)
	})
}

// FuzzSQLiteRecord runs the record parsers on arbitrary bytes: the rowid
// of an index record and a schema record, as an index page's cells and a
// schema leaf give them.
// Run: go test -fuzz FuzzSQLiteRecord -fuzztime 60s -fuzzminimizetime 2s ./adapters
func FuzzSQLiteRecord(f *testing.F) {
	f.Add(makeRecord([]uint64{text("user0000000042"), 2}, []byte("user0000000042"), []byte{0x0b, 0xb8}))
	f.Add(makeRecord([]uint64{text("table"), text("t"), text("t"), 1, text("CREATE TABLE t(a PRIMARY KEY) WITHOUT ROWID")},
		[]byte("table"), []byte("t"), []byte("t"), []byte{2}, []byte("CREATE TABLE t(a PRIMARY KEY) WITHOUT ROWID")))
	f.Add(makeRecord([]uint64{text("index"), text("i"), text("t"), 4, 0}, []byte("index"), []byte("i"), []byte("t"), []byte{0, 0, 0, 3}))
	f.Fuzz(func(t *testing.T, rec []byte) {
		sqliteRecordRowid(rec)
		var s sqliteSchema
		for p := uint32(1); p <= 3; p++ {
			s.addRecord(rec, p)
		}
		if len(s.objs) > 3 {
			t.Fatalf("%d objects from 3 records", len(s.objs))
		}
		for _, o := range s.objs {
			s.tableOf(o.root)
		}
		s.drop(2)
		withoutRowid(rec)
		asciiIs(rec, "table")
		nameHash(rec)
	})
}

// FuzzLMDB runs the LMDB adapter on arbitrary files and accesses.
// Run: go test -fuzz FuzzLMDB -fuzztime 60s -fuzzminimizetime 2s ./adapters
// (the seeds are 64 KiB files: minimizing each new input for the default
// 60 s would stall the run).
func FuzzLMDB(f *testing.F) {
	f.Add(prefix(f, "lmdb/small.mdb.gz", 64<<10), seqPattern(16))
	f.Add(prefix(f, "lmdb/big.mdb.gz", 64<<10), []byte{0, 0, 0, 1, 0x10, 3, 0x20, 2, 0x10, 9})
	f.Fuzz(func(t *testing.T, data, pattern []byte) {
		fuzzStage(t, LMDB, data, pattern, 0)
		fuzzStage(t, LMDB, data, pattern, -1)
	})
}

// FuzzGGUF runs the GGUF adapter on arbitrary files and accesses.
// Run: go test -fuzz FuzzGGUF -fuzztime 60s -fuzzminimizetime 2s ./adapters
func FuzzGGUF(f *testing.F) {
	f.Add(prefix(f, "gguf/small-q8.gguf", 16<<10), seqPattern(3))
	f.Add(prefix(f, "gguf/small-q4.gguf", 16<<10), []byte{0, 2, 0, 0, 0, 1, 0xc0, 5})
	for _, bo := range []binary.AppendByteOrder{binary.LittleEndian, binary.BigEndian} {
		b := &ggufBuilder{bo: bo}
		f.Add(b.file(3, smallModel(b), 32, true), seqPattern(2))
	}
	f.Fuzz(func(t *testing.T, data, pattern []byte) {
		fuzzStage(t, GGUF, data, pattern, 0)
	})
}
