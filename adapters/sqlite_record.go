package adapters

import (
	"bytes"
	"math"
)

// SQLite records and the schema table (fileformat2 sections 2.1 and 2.6):
// a record is a header (its own length as a varint, then one serial type
// varint per column) and a body (the columns' values, back to back). The
// schema table sqlite_schema(type, name, tbl_name, rootpage, sql) is the
// table B-tree rooted at page 1.

// sqliteSerialSize returns the body size of serial type t; ok is false
// for the reserved types 10 and 11.
func sqliteSerialSize(t uint64) (uint64, bool) {
	switch {
	case t <= 4:
		return t, true
	case t == 5:
		return 6, true
	case t == 6 || t == 7:
		return 8, true
	case t == 8 || t == 9:
		return 0, true
	case t == 10 || t == 11:
		return 0, false
	}
	return (t - 12) / 2, true
}

// sqliteInt decodes an integer column of serial type t (1-6, 8, 9):
// big-endian two's complement of 1, 2, 3, 4, 6 or 8 bytes, or the
// constants 0 and 1. ok is false for other types or a short body.
func sqliteInt(t uint64, b []byte) (int64, bool) {
	switch t {
	case 8:
		return 0, true
	case 9:
		return 1, true
	}
	n, _ := sqliteSerialSize(t)
	if t < 1 || t > 6 || uint64(len(b)) < n {
		return 0, false
	}
	v := int64(int8(b[0]))
	for _, c := range b[1:n] {
		v = v<<8 | int64(c)
	}
	return v, true
}

// maxColumnSize bounds a column's body: larger sizes are malformed (a
// payload is at most about 2^31 bytes).
const maxColumnSize = 1 << 32

// record reads a record's columns in order. It never reads beyond rec
// (the payload's local bytes): a column whose body lies beyond it has a
// nil body.
type record struct {
	rec []byte
	hp  int    // next serial type
	end int    // end of the header
	bp  uint64 // body offset of the next column
	bad bool   // the header is malformed
}

// newRecord starts reading the record at the start of rec.
func newRecord(rec []byte) (record, bool) {
	h, l := sqliteVarint(rec)
	if l == 0 || h < uint64(l) || h > uint64(len(rec)) {
		return record{}, false
	}
	return record{rec: rec, hp: l, end: int(h), bp: h}, true
}

// next returns the next column's serial type and body; ok is false after
// the last column or at a malformed serial type (then r.bad is set).
func (r *record) next() (typ uint64, body []byte, ok bool) {
	if r.hp >= r.end || r.bad {
		return 0, nil, false
	}
	t, l := sqliteVarint(r.rec[r.hp:r.end])
	n, valid := sqliteSerialSize(t)
	if l == 0 || !valid || n > maxColumnSize {
		r.bad = true
		return 0, nil, false
	}
	r.hp += l
	start := r.bp
	r.bp += n
	if r.bp <= uint64(len(r.rec)) {
		body = r.rec[start:r.bp]
	}
	return t, body, true
}

// sqliteRecordRowid returns the last column of record rec as an integer:
// the rowid of an index record of a rowid table. rec must hold the whole
// record.
func sqliteRecordRowid(rec []byte) (int64, bool) {
	r, ok := newRecord(rec)
	if !ok {
		return 0, false
	}
	var typ uint64
	var body []byte
	n := 0
	for t, b, ok := r.next(); ok; t, b, ok = r.next() {
		typ, body = t, b
		n++
	}
	if r.bad || n < 2 || (body == nil && typ != 8 && typ != 9) {
		return 0, false
	}
	return sqliteInt(typ, body)
}

// sqliteObject is an entry of sqlite_schema that the adapter uses: a
// table or an index with a B-tree.
type sqliteObject struct {
	root    uint32
	from    uint32 // the schema leaf page it was read from
	table   uint64 // hash of the name of the table (a table's name, an index's tbl_name)
	index   bool
	noRowid bool // a WITHOUT ROWID table (its sql says so, or its root is an index page)
}

// maxSchemaObjects bounds the schema entries kept per database.
const maxSchemaObjects = 1024

// sqliteSchema is what the adapter knows of a database's schema table.
type sqliteSchema struct {
	objs []sqliteObject
}

// nameHash hashes an identifier as SQLite compares them: ASCII letters
// case-folded. NUL bytes are skipped, so UTF-16 names hash as their
// UTF-8 forms do when they are ASCII.
func nameHash(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		if c == 0 {
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// asciiIs reports whether text b is the ASCII string s in the database's
// encoding: UTF-8, or UTF-16 of either byte order (NUL bytes skipped).
func asciiIs(b []byte, s string) bool {
	i := 0
	for _, c := range b {
		if c == 0 {
			continue
		}
		if i >= len(s) || s[i] != c {
			return false
		}
		i++
	}
	return i == len(s)
}

// withoutRowid reports whether the CREATE TABLE statement sql ends with
// the table option WITHOUT ROWID (after its column list's closing
// parenthesis; options are separated by commas). NUL bytes (UTF-16) are
// skipped.
func withoutRowid(sql []byte) bool {
	i := bytes.LastIndexByte(sql, ')')
	if i < 0 {
		return false
	}
	var w [64]byte
	w[0] = ' '
	n := 1
	space := true
	for _, c := range sql[i+1:] {
		switch {
		case c == 0:
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == ',' || c == ';':
			if !space && n < len(w) {
				w[n] = ' '
				n++
			}
			space = true
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if n < len(w) {
			w[n] = c
			n++
		}
		space = false
	}
	if !space && n < len(w) {
		w[n] = ' '
		n++
	}
	return bytes.Contains(w[:n], []byte(" without rowid "))
}

// drop removes the objects read from schema leaf page.
func (s *sqliteSchema) drop(page uint32) {
	objs := s.objs[:0]
	for _, o := range s.objs {
		if o.from != page {
			objs = append(objs, o)
		}
	}
	s.objs = objs
}

// addRecord adds the schema record rec (the local bytes of a payload of
// size p) read from page. It reports whether the record was well formed.
func (s *sqliteSchema) addRecord(rec []byte, page uint32) bool {
	r, ok := newRecord(rec)
	if !ok {
		return false
	}
	var o sqliteObject
	o.from = page
	var name []byte
	for col := 0; col < 5; col++ {
		t, b, ok := r.next()
		if !ok {
			return false // the schema table has five columns
		}
		text := t >= 13 && t%2 == 1
		switch col {
		case 0:
			switch {
			case text && asciiIs(b, "table"):
			case text && asciiIs(b, "index"):
				o.index = true
			default:
				return text // views and triggers have no B-tree
			}
		case 2:
			if !text || b == nil {
				return false
			}
			name = b
		case 3:
			root, ok := sqliteInt(t, b)
			if !ok || root < 0 || root > math.MaxUint32 {
				return false
			}
			o.root = uint32(root)
		case 4:
			if !o.index && t >= 13 && t%2 == 1 {
				// The whole statement is needed to see its options; a
				// statement that overflows is judged by its root page.
				o.noRowid = b != nil && withoutRowid(b)
			}
		}
	}
	if o.root == 0 { // virtual tables
		return true
	}
	o.table = nameHash(name)
	if len(s.objs) < maxSchemaObjects {
		s.objs = append(s.objs, o)
	}
	return true
}

// tableOf returns the root page of the rowid table that the index rooted
// at page root belongs to.
func (s *sqliteSchema) tableOf(root uint32) (uint32, bool) {
	if root == 0 {
		return 0, false
	}
	for i := range s.objs {
		ix := &s.objs[i]
		if ix.root != root || !ix.index {
			continue
		}
		for j := range s.objs {
			t := &s.objs[j]
			if !t.index && t.table == ix.table {
				return t.root, !t.noRowid
			}
		}
		return 0, false
	}
	return 0, false
}

// object returns the object whose B-tree is rooted at page, nil when none
// is known.
func (s *sqliteSchema) object(page uint32) *sqliteObject {
	for i := range s.objs {
		if s.objs[i].root == page {
			return &s.objs[i]
		}
	}
	return nil
}

// counts returns the numbers of tables and indexes known.
func (s *sqliteSchema) counts() (tables, indexes int) {
	for _, o := range s.objs {
		if o.index {
			indexes++
		} else {
			tables++
		}
	}
	return tables, indexes
}
