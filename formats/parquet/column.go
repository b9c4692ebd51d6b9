package parquet

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Parquet physical types, repetitions, converted types and encodings
// (parquet.thrift).
const (
	typeInt32     = 1
	typeInt64     = 2
	typeByteArray = 6

	required = 0
	repeated = 2

	convUTF8 = 0
	convList = 3

	encPlain      = 0
	encRLE        = 3
	encDelta      = 5
	encRLEDict    = 8
	pageData      = 0
	pageDict      = 2
	codecZstd     = 6
	noConverted   = -1
	listGroupName = "list"
	elementName   = "element"
)

// column is one leaf column being written: its schema, the page being
// filled and the pages of the current row group's chunk.
type column struct {
	name string
	path []string // path_in_schema
	list bool     // a list<int>: a 3-level LIST group around the leaf

	phys      int32
	bitWidth  int8 // of an integer's logical type
	signed    bool
	converted int32
	str       bool // logical type STRING
	dict      bool // dictionary encoding
	narrow    bool // INT32: deltas wrap at 32 bits

	// The page being filled.
	ints     []int64  // integer values
	idx      []uint32 // dictionary indices
	plain    []byte   // PLAIN byte-array values
	rep, def []uint32 // list levels
	levels   int      // values (with empty lists) in the page

	// The chunk's dictionary.
	sdict     map[string]uint32
	idict     map[int64]uint32
	dictPlain []byte
	ndict     int
	remap     []int32 // the batch's dictionary index → ours (-1: unknown)

	// The chunk's pages, headers included.
	pages        []byte
	uncompressed int64
	numValues    int64
}

// newColumn describes the leaf of Arrow field f, or says why it cannot
// be written.
func newColumn(f arrow.Field) (*column, error) {
	c := &column{name: f.Name, path: []string{f.Name}}
	t := f.Type
	if l, ok := t.(*arrow.ListType); ok {
		c.list = true
		c.path = []string{f.Name, listGroupName, elementName}
		t = l.Elem()
		if !isInt(t) {
			return nil, fmt.Errorf("column %s: list of %s: only lists of integers are written", f.Name, t)
		}
	}
	switch t := t.(type) {
	case *arrow.StringType:
		c.phys, c.str, c.converted = typeByteArray, true, convUTF8
	case *arrow.DictionaryType:
		if _, ok := t.ValueType.(*arrow.StringType); !ok {
			return nil, fmt.Errorf("column %s: dictionary of %s: only string dictionaries are written", f.Name, t.ValueType)
		}
		c.phys, c.str, c.converted, c.dict = typeByteArray, true, convUTF8, true
	default:
		if !isInt(t) {
			return nil, fmt.Errorf("column %s: type %s is not written", f.Name, t)
		}
		c.intType(t)
	}
	return c, nil
}

func isInt(t arrow.DataType) bool { return arrow.IsInteger(t.ID()) }

// intType sets the physical and logical type of an integer leaf: 8-bit
// integers are dictionary-encoded (small enums), list elements PLAIN, the
// rest delta-encoded.
func (c *column) intType(t arrow.DataType) {
	w := t.(arrow.FixedWidthDataType).BitWidth()
	c.bitWidth = int8(w)
	c.signed = arrow.IsSignedInteger(t.ID())
	c.phys, c.narrow = typeInt32, true
	if w == 64 {
		c.phys, c.narrow = typeInt64, false
	}
	c.converted = convertedInt(w, c.signed)
	c.dict = w == 8 && !c.list
}

// convertedInt is the converted type of a w-bit integer: UINT_8, UINT_16,
// UINT_32, UINT_64 are 11-14, INT_8 to INT_64 15-18.
func convertedInt(w int, signed bool) int32 {
	c := map[int]int32{8: 11, 16: 12, 32: 13, 64: 14}[w]
	if signed {
		c += 4
	}
	return c
}

// add appends rows [from, to) of a, the batch's column.
func (c *column) add(a arrow.Array, from, to int) error {
	if n := a.NullN(); n > 0 {
		return fmt.Errorf("column %s: %d null values: the columns written are required", c.name, n)
	}
	if c.list {
		return c.addList(a.(*array.List), from, to)
	}
	if d, ok := a.(*array.Dictionary); ok {
		return c.addDict(d, from, to)
	}
	if s, ok := a.(*array.String); ok {
		for i := from; i < to; i++ {
			v := s.Value(i)
			c.plain = binary.LittleEndian.AppendUint32(c.plain, uint32(len(v)))
			c.plain = append(c.plain, v...)
		}
		c.levels += to - from
		return nil
	}
	n := len(c.ints)
	c.ints = appendInts(c.ints, a, from, to)
	c.levels += to - from
	if c.dict {
		for _, v := range c.ints[n:] {
			c.idx = append(c.idx, c.intIndex(v))
		}
		c.ints = c.ints[:n]
	}
	return nil
}

// appendInts appends a's values [from, to) as int64s (unsigned 64-bit
// values as their bit patterns).
func appendInts(dst []int64, a arrow.Array, from, to int) []int64 {
	switch a := a.(type) {
	case *array.Uint8:
		return widen(dst, a.Uint8Values()[from:to])
	case *array.Int8:
		return widen(dst, a.Int8Values()[from:to])
	case *array.Uint16:
		return widen(dst, a.Uint16Values()[from:to])
	case *array.Int16:
		return widen(dst, a.Int16Values()[from:to])
	case *array.Uint32:
		return widen(dst, a.Uint32Values()[from:to])
	case *array.Int32:
		return widen(dst, a.Int32Values()[from:to])
	case *array.Uint64:
		return widen(dst, a.Uint64Values()[from:to])
	case *array.Int64:
		return append(dst, a.Int64Values()[from:to]...)
	}
	return dst
}

func widen[T ~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~uint64](dst []int64, v []T) []int64 {
	for _, x := range v {
		dst = append(dst, int64(x))
	}
	return dst
}

// addList appends rows [from, to) of a list<int> column, with their
// repetition and definition levels (an empty list: one level of 0, no
// value).
func (c *column) addList(l *array.List, from, to int) error {
	vals := l.ListValues()
	if n := vals.NullN(); n > 0 {
		return fmt.Errorf("column %s: %d null list elements: the elements written are required", c.name, n)
	}
	for i := from; i < to; i++ {
		s, e := l.ValueOffsets(i)
		if s == e {
			c.rep, c.def = append(c.rep, 0), append(c.def, 0)
			c.levels++
			continue
		}
		c.ints = appendInts(c.ints, vals, int(s), int(e))
		for j := s; j < e; j++ {
			r := uint32(1)
			if j == s {
				r = 0
			}
			c.rep, c.def = append(c.rep, r), append(c.def, 1)
		}
		c.levels += int(e - s)
	}
	return nil
}

// addDict appends rows [from, to) of a dictionary<int, string> column:
// each batch's dictionary is mapped onto the chunk's.
func (c *column) addDict(d *array.Dictionary, from, to int) error {
	words, ok := d.Dictionary().(*array.String)
	if !ok {
		return fmt.Errorf("column %s: dictionary values are %s, not strings", c.name, d.Dictionary().DataType())
	}
	if cap(c.remap) < words.Len() {
		c.remap = make([]int32, words.Len())
	}
	c.remap = c.remap[:words.Len()]
	for i := range c.remap {
		c.remap[i] = -1
	}
	for i := from; i < to; i++ {
		k := d.GetValueIndex(i)
		if k < 0 || k >= words.Len() {
			return fmt.Errorf("column %s row %d: dictionary index %d out of range [0, %d)", c.name, i, k, words.Len())
		}
		if c.remap[k] < 0 {
			c.remap[k] = int32(c.strIndex(words.Value(k)))
		}
		c.idx = append(c.idx, uint32(c.remap[k]))
	}
	c.levels += to - from
	return nil
}

// strIndex returns the chunk's dictionary index of s, adding it.
func (c *column) strIndex(s string) uint32 {
	if i, ok := c.sdict[s]; ok {
		return i
	}
	if c.sdict == nil {
		c.sdict = make(map[string]uint32)
	}
	i := uint32(c.ndict)
	c.sdict[s] = i
	c.ndict++
	c.dictPlain = binary.LittleEndian.AppendUint32(c.dictPlain, uint32(len(s)))
	c.dictPlain = append(c.dictPlain, s...)
	return i
}

// intIndex returns the chunk's dictionary index of v, adding it.
func (c *column) intIndex(v int64) uint32 {
	if i, ok := c.idict[v]; ok {
		return i
	}
	if c.idict == nil {
		c.idict = make(map[int64]uint32)
	}
	i := uint32(c.ndict)
	c.idict[v] = i
	c.ndict++
	c.dictPlain = binary.LittleEndian.AppendUint32(c.dictPlain, uint32(v))
	return i
}

// encoding is the encoding of the column's data pages.
func (c *column) encoding() int32 {
	switch {
	case c.dict:
		return encRLEDict
	case c.phys == typeByteArray, c.list:
		// PLAIN list elements compress better than their deltas: a
		// tree's lists repeat (siblings name the same children), and zstd
		// finds the repeats in the plain bytes.
		return encPlain
	}
	return encDelta
}

// encodePage appends the page's body: levels, then values.
func (c *column) encodePage(dst []byte, s *scratch) []byte {
	if c.list {
		dst = appendLevels(dst, c.rep, s)
		dst = appendLevels(dst, c.def, s)
	}
	switch c.encoding() {
	case encRLEDict:
		w := bitWidth(uint32(max(c.ndict, 1) - 1))
		dst = append(dst, byte(w))
		dst = appendHybrid(dst, c.idx, w, &s.group)
	case encPlain:
		dst = append(dst, c.plain...)
		for _, v := range c.ints {
			if c.narrow {
				dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
			} else {
				dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
			}
		}
	default:
		dst = appendDelta(dst, c.ints, c.narrow, &s.block)
	}
	return dst
}

// appendLevels appends levels of bit width 1 as Parquet's data page v1
// holds them: a 4-byte length, then the RLE/bit-packed hybrid.
func appendLevels(dst []byte, levels []uint32, s *scratch) []byte {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendHybrid(dst, levels, 1, &s.group)
	binary.LittleEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst
}

// resetPage empties the page being filled.
func (c *column) resetPage() {
	c.ints, c.idx, c.plain = c.ints[:0], c.idx[:0], c.plain[:0]
	c.rep, c.def = c.rep[:0], c.def[:0]
	c.levels = 0
}

// resetChunk empties the chunk and its dictionary, after its row group.
func (c *column) resetChunk() {
	c.pages, c.uncompressed, c.numValues = c.pages[:0], 0, 0
	clear(c.sdict)
	clear(c.idict)
	c.dictPlain, c.ndict = c.dictPlain[:0], 0
}

// scratch is the encoders' reusable state.
type scratch struct {
	block [deltaBlock]uint64
	group [8]uint64
	body  []byte
	comp  []byte
}
