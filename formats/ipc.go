package formats

// This file holds a small, allocation-free Arrow IPC encoder and decoder for
// the record batches of the three bundle tables. The schema message and the
// footer's schema come from arrow-go (see footer.go), so files stay plain
// Arrow IPC files that pyarrow, DuckDB and polars read. The hot paths (writing
// and reading access rows) bypass arrow-go's per-buffer streaming zstd codec,
// which is several times too slow for the targets in docs/BENCHMARKS.md.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	flatbuffers "github.com/google/flatbuffers/go"
	"github.com/klauspost/compress/zstd"
)

// Arrow IPC constants (format/Message.fbs, format/Schema.fbs).
const (
	msgSchema          = 1
	msgDictionaryBatch = 2
	msgRecordBatch     = 3

	metadataV5   = 4
	codecZstd    = 1
	continuation = 0xFFFFFFFF

	// flatbuffers Type union tags.
	typeNull      = 1
	typeInt       = 2
	typeBinary    = 4
	typeUtf8      = 5
	typeBool      = 6
	typeList      = 12
	typeStruct    = 13
	typeFixedList = 16
	typeLargeBin  = 19
	typeLargeUtf8 = 20
	typeLargeList = 21
)

var arrowMagic = []byte("ARROW1\x00\x00")

// Reader limits, so that corrupt lengths cannot make a reader allocate
// gigabytes: rows per batch, bytes per decompressed buffer, decompressed
// bytes per batch, and schema fields (counting nested ones).
const (
	maxBatchRows   = 1 << 22
	maxBufferBytes = 128 << 20
	maxBatchBytes  = 512 << 20
	maxFields      = 10000
)

// ---------------------------------------------------------------------------
// Encoding

type bufMeta struct{ off, len int64 }
type nodeMeta struct{ len, nulls int64 }

// batchEncoder builds one record batch or dictionary batch message.
type batchEncoder struct {
	zenc  *zstd.Encoder
	fb    *flatbuffers.Builder
	body  []byte
	bufs  []bufMeta
	nodes []nodeMeta
	msg   []byte // framed message: prefix, flatbuffer, padding
	zeros map[int][]byte
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func newBatchEncoder() *batchEncoder {
	// SpeedFastest with one goroutine: docs/BENCHMARKS.md shows it reaches the
	// size target; better levels gain under 2% on access tables.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true),
		zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic(err) // only on invalid options
	}
	return &batchEncoder{zenc: enc, fb: flatbuffers.NewBuilder(1024)}
}

func (e *batchEncoder) reset() {
	e.body = e.body[:0]
	e.bufs = e.bufs[:0]
	e.nodes = e.nodes[:0]
}

func (e *batchEncoder) node(n int) { e.nodes = append(e.nodes, nodeMeta{int64(n), 0}) }

// buffer appends one body buffer, zstd-compressed with its uncompressed
// length as an int64 prefix, or stored raw behind a -1 prefix when
// compression does not pay.
func (e *batchEncoder) buffer(raw []byte) {
	off := len(e.body)
	if len(raw) == 0 {
		e.bufs = append(e.bufs, bufMeta{int64(off), 0})
		return
	}
	e.body = binary.LittleEndian.AppendUint64(e.body, uint64(len(raw)))
	if allZero(raw) {
		// Columns a writer leaves 0 (the 1.1 columns of a recorder that
		// lacks them): the same frame every batch, compressed once.
		z, ok := e.zeros[len(raw)]
		if !ok {
			z = e.zenc.EncodeAll(raw, nil)
			if e.zeros == nil {
				e.zeros = map[int][]byte{}
			}
			e.zeros[len(raw)] = z
		}
		e.body = append(e.body, z...)
	} else {
		e.body = e.zenc.EncodeAll(raw, e.body)
	}
	if len(e.body)-off-8 >= len(raw) {
		e.body = e.body[:off]
		e.body = binary.LittleEndian.AppendUint64(e.body, math.MaxUint64) // -1
		e.body = append(e.body, raw...)
	}
	n := len(e.body) - off
	for len(e.body)%8 != 0 {
		e.body = append(e.body, 0)
	}
	e.bufs = append(e.bufs, bufMeta{int64(off), int64(n)})
}

// repeat appends a copy of body buffer i, for a raw buffer equal to it.
func (e *batchEncoder) repeat(i int) {
	bm := e.bufs[i]
	off := len(e.body)
	e.body = append(e.body, e.body[bm.off:bm.off+bm.len]...)
	for len(e.body)%8 != 0 {
		e.body = append(e.body, 0)
	}
	e.bufs = append(e.bufs, bufMeta{int64(off), bm.len})
}

// finish builds the framed message for a record batch (dictID < 0) or a
// dictionary batch of nrows rows.
//
// The message's custom_metadata holds MetaCRC32C: the CRC32C of the framed
// message (prefix, metadata, padding and body) computed with the value's
// eight hex digits set to '0' (see checkMessageCRC).
func (e *batchEncoder) finish(nrows int, dictID int64, isDelta bool) {
	b := e.fb
	b.Reset()
	crcKey := b.CreateString(MetaCRC32C)
	crcVal := b.CreateString(crcPlaceholder)
	b.StartObject(2)
	b.PrependUOffsetTSlot(0, crcKey, 0)
	b.PrependUOffsetTSlot(1, crcVal, 0)
	kv := b.EndObject()
	b.StartVector(4, 1, 4)
	b.PrependUOffsetT(kv)
	meta := b.EndVector(1)

	b.StartObject(2)
	b.PrependByteSlot(0, codecZstd, 0)
	comp := b.EndObject()

	b.StartVector(16, len(e.nodes), 8)
	for i := len(e.nodes) - 1; i >= 0; i-- {
		b.Prep(8, 16)
		b.PrependInt64(e.nodes[i].nulls)
		b.PrependInt64(e.nodes[i].len)
	}
	nodes := b.EndVector(len(e.nodes))
	b.StartVector(16, len(e.bufs), 8)
	for i := len(e.bufs) - 1; i >= 0; i-- {
		b.Prep(8, 16)
		b.PrependInt64(e.bufs[i].len)
		b.PrependInt64(e.bufs[i].off)
	}
	bufs := b.EndVector(len(e.bufs))

	b.StartObject(5)
	b.PrependInt64Slot(0, int64(nrows), 0)
	b.PrependUOffsetTSlot(1, nodes, 0)
	b.PrependUOffsetTSlot(2, bufs, 0)
	b.PrependUOffsetTSlot(3, comp, 0)
	hdr := b.EndObject()
	hdrType := byte(msgRecordBatch)
	if dictID >= 0 {
		b.StartObject(3)
		b.PrependInt64Slot(0, dictID, -1)
		b.PrependUOffsetTSlot(1, hdr, 0)
		b.PrependBoolSlot(2, isDelta, false)
		hdr = b.EndObject()
		hdrType = msgDictionaryBatch
	}
	b.StartObject(5)
	b.PrependInt16Slot(0, metadataV5, 0)
	b.PrependByteSlot(1, hdrType, 0)
	b.PrependUOffsetTSlot(2, hdr, 0)
	b.PrependInt64Slot(3, int64(len(e.body)), 0)
	b.PrependUOffsetTSlot(4, meta, 0)
	msg := b.EndObject()
	b.Finish(msg)
	fbb := b.FinishedBytes()

	padded := (len(fbb) + 8 + 7) &^ 7
	e.msg = e.msg[:0]
	e.msg = binary.LittleEndian.AppendUint32(e.msg, continuation)
	e.msg = binary.LittleEndian.AppendUint32(e.msg, uint32(padded-8))
	e.msg = append(e.msg, fbb...)
	for len(e.msg) < padded {
		e.msg = append(e.msg, 0)
	}
	// crcVal counts from the end of the flatbuffer; its bytes follow the
	// string's 4-byte length.
	pos := 8 + len(fbb) - int(crcVal) + 4
	crc := crc32.Update(0, castagnoli, e.msg)
	crc = crc32.Update(crc, castagnoli, e.body)
	putCRC(e.msg[pos:pos+8], crc)
}

// castagnoli is the CRC32C table (hardware-accelerated with SSE 4.2).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const hexDigits = "0123456789abcdef"

// putCRC writes crc as eight lowercase hex digits.
func putCRC(dst []byte, crc uint32) {
	for i := 7; i >= 0; i-- {
		dst[i] = hexDigits[crc&15]
		crc >>= 4
	}
}

// parseCRC parses eight lowercase hex digits.
func parseCRC(b []byte) (uint32, bool) {
	if len(b) != 8 {
		return 0, false
	}
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

var zeroCRC = []byte(crcPlaceholder)

// crcWithPlaceholder returns the CRC32C of region with the eight bytes at
// pos (relative to region) read as crcPlaceholder, and the CRC stored there.
func crcWithPlaceholder(region []byte, pos int) (computed, stored uint32, ok bool) {
	if pos < 0 || pos+8 > len(region) {
		return 0, 0, false
	}
	stored, ok = parseCRC(region[pos : pos+8])
	c := crc32.Update(0, castagnoli, region[:pos])
	c = crc32.Update(c, castagnoli, zeroCRC)
	c = crc32.Update(c, castagnoli, region[pos+8:])
	return c, stored, ok
}

// ---------------------------------------------------------------------------
// Flatbuffer reading with bounds checks. Every accessor panics with
// corruptPanic on bad offsets; callers recover with catch.

type corruptPanic struct{ msg string }

func fbFail(format string, args ...any) {
	panic(corruptPanic{fmt.Sprintf(format, args...)})
}

// catch converts a corruptPanic, or any runtime panic raised while decoding
// untrusted bytes, into an error wrapping ErrCorrupt.
func catch(err *error, what string) {
	if r := recover(); r != nil {
		if c, ok := r.(corruptPanic); ok {
			*err = fmt.Errorf("%s: %s: %w", what, c.msg, ErrCorrupt)
			return
		}
		*err = fmt.Errorf("%s: malformed data (%v): %w", what, r, ErrCorrupt)
	}
}

type fbTable struct {
	b   []byte
	pos int
	vt  int
	vtl int
}

func fbU32(b []byte, off int) uint32 {
	if off < 0 || off+4 > len(b) {
		fbFail("flatbuffer offset %d out of range", off)
	}
	return binary.LittleEndian.Uint32(b[off:])
}

func fbRoot(b []byte) fbTable {
	return fbTableAt(b, int(fbU32(b, 0)))
}

func fbTableAt(b []byte, pos int) fbTable {
	soff := int32(fbU32(b, pos))
	vt := pos - int(soff)
	if vt < 0 || vt+4 > len(b) {
		fbFail("flatbuffer vtable out of range")
	}
	vtl := int(binary.LittleEndian.Uint16(b[vt:]))
	if vtl < 4 || vt+vtl > len(b) {
		fbFail("flatbuffer vtable length %d invalid", vtl)
	}
	return fbTable{b: b, pos: pos, vt: vt, vtl: vtl}
}

// field returns the absolute offset of field i, or 0 when absent.
func (t fbTable) field(i int) int {
	o := 4 + 2*i
	if o+2 > t.vtl {
		return 0
	}
	f := int(binary.LittleEndian.Uint16(t.b[t.vt+o:]))
	if f == 0 {
		return 0
	}
	return t.pos + f
}

func (t fbTable) check(off, n int) {
	if off < 0 || off+n > len(t.b) {
		fbFail("flatbuffer field out of range")
	}
}

func (t fbTable) u8(i int, def uint8) uint8 {
	off := t.field(i)
	if off == 0 {
		return def
	}
	t.check(off, 1)
	return t.b[off]
}

func (t fbTable) i16(i int, def int16) int16 {
	off := t.field(i)
	if off == 0 {
		return def
	}
	t.check(off, 2)
	return int16(binary.LittleEndian.Uint16(t.b[off:]))
}

func (t fbTable) i32(i int, def int32) int32 {
	off := t.field(i)
	if off == 0 {
		return def
	}
	t.check(off, 4)
	return int32(binary.LittleEndian.Uint32(t.b[off:]))
}

func (t fbTable) i64(i int, def int64) int64 {
	off := t.field(i)
	if off == 0 {
		return def
	}
	t.check(off, 8)
	return int64(binary.LittleEndian.Uint64(t.b[off:]))
}

// table returns the sub-table in field i.
func (t fbTable) table(i int) (fbTable, bool) {
	off := t.field(i)
	if off == 0 {
		return fbTable{}, false
	}
	return fbTableAt(t.b, off+int(fbU32(t.b, off))), true
}

// vector returns the element start and length of vector field i whose
// elements are elem bytes wide.
func (t fbTable) vector(i, elem int) (start, n int) {
	off := t.field(i)
	if off == 0 {
		return 0, 0
	}
	v := off + int(fbU32(t.b, off))
	n = int(fbU32(t.b, v))
	start = v + 4
	if n < 0 || start+n*elem > len(t.b) || start+n*elem < start {
		fbFail("flatbuffer vector length %d out of range", n)
	}
	return start, n
}

func (t fbTable) str(i int) string {
	start, n := t.vector(i, 1)
	return string(t.b[start : start+n])
}

// bytes returns the bytes of string field i without copying, and their
// offset in t.b.
func (t fbTable) bytes(i int) ([]byte, int) {
	start, n := t.vector(i, 1)
	return t.b[start : start+n], start
}

// findMeta returns the offset in t.b of the value of key in the KeyValue
// vector field i (custom_metadata), or -1 when absent, and the value.
func (t fbTable) findMeta(i int, key string) (int, []byte) {
	ks, kn := t.vector(i, 4)
	for j := 0; j < kn && j < 1024; j++ {
		kv := t.tableVecAt(ks, j)
		if k, _ := kv.bytes(0); string(k) == key {
			v, off := kv.bytes(1)
			return off, v
		}
	}
	return -1, nil
}

// tableVecAt returns element j of a vector of tables starting at start.
func (t fbTable) tableVecAt(start, j int) fbTable {
	off := start + 4*j
	return fbTableAt(t.b, off+int(fbU32(t.b, off)))
}

// ---------------------------------------------------------------------------
// Schemas

// colType is the subset of Arrow types this package decodes.
type colType struct {
	id       int // flatbuffers Type tag
	bitWidth int
	signed   bool
	children []colType
	dict     bool // dictionary-encoded: id/bitWidth/signed describe the index, value is the value type
	dictID   int64
	value    *colType
}

type colField struct {
	name string
	typ  colType
}

func (t colType) String() string {
	if t.dict {
		return fmt.Sprintf("dictionary<%s, %s>", intName(t.bitWidth, t.signed), t.value)
	}
	switch t.id {
	case typeInt:
		return intName(t.bitWidth, t.signed)
	case typeUtf8:
		return "string"
	case typeLargeUtf8:
		return "large_string"
	case typeBinary:
		return "binary"
	case typeList:
		if len(t.children) == 1 {
			return "list<" + t.children[0].String() + ">"
		}
	case typeBool:
		return "bool"
	}
	return fmt.Sprintf("arrow type %d", t.id)
}

func intName(bits int, signed bool) string {
	if signed {
		return fmt.Sprintf("int%d", bits)
	}
	return fmt.Sprintf("uint%d", bits)
}

// parseSchema reads a Schema flatbuffer table.
func parseSchema(t fbTable) (fields []colField, meta map[string]string) {
	start, n := t.vector(1, 4)
	if n > 4096 {
		fbFail("schema has %d fields", n)
	}
	budget := maxFields
	for j := 0; j < n; j++ {
		fields = append(fields, parseField(t.tableVecAt(start, j), 0, &budget))
	}
	t.vector(3, 8) // features
	meta = map[string]string{}
	ks, kn := t.vector(2, 4)
	for j := 0; j < kn && j < 1024; j++ {
		kv := t.tableVecAt(ks, j)
		meta[kv.str(0)] = kv.str(1)
	}
	return fields, meta
}

func parseField(f fbTable, depth int, budget *int) colField {
	if depth > 32 {
		fbFail("schema nesting too deep")
	}
	if *budget--; *budget < 0 {
		fbFail("schema has more than %d fields", maxFields)
	}
	cf := colField{name: f.str(0)}
	ms, mn := f.vector(6, 4) // custom_metadata
	for j := 0; j < mn; j++ {
		kv := f.tableVecAt(ms, j)
		kv.str(0)
		kv.str(1)
	}
	cf.typ.id = int(f.u8(2, 0))
	if tt, ok := f.table(3); ok && cf.typ.id == typeInt {
		cf.typ.bitWidth = int(tt.i32(0, 0))
		cf.typ.signed = tt.u8(1, 0) != 0
	}
	cs, cn := f.vector(5, 4)
	if cn > 4096 {
		fbFail("field has %d children", cn)
	}
	for j := 0; j < cn; j++ {
		cf.typ.children = append(cf.typ.children, parseField(f.tableVecAt(cs, j), depth+1, budget).typ)
	}
	if d, ok := f.table(4); ok {
		v := cf.typ
		cf.typ = colType{dict: true, dictID: d.i64(0, 0), id: typeInt, bitWidth: 32, signed: true, value: &v}
		if it, ok := d.table(1); ok {
			cf.typ.bitWidth = int(it.i32(0, 32))
			cf.typ.signed = it.u8(1, 0) != 0
		}
	}
	return cf
}

// layout returns the number of field nodes and buffers a column of type t
// occupies in a record batch, or ok=false for types this package cannot skip.
func (t colType) layout() (nodes, bufs int, ok bool) {
	if t.dict {
		return 1, 2, true
	}
	switch t.id {
	case typeNull:
		return 1, 0, true
	case typeInt, typeBool, 3 /*float*/, 7 /*decimal*/, 8 /*date*/, 9 /*time*/, 10 /*timestamp*/, 11 /*interval*/, 15 /*fixed binary*/, 18 /*duration*/ :
		return 1, 2, true
	case typeBinary, typeUtf8, typeLargeBin, typeLargeUtf8:
		return 1, 3, true
	case typeList, typeLargeList, 17 /*map*/, typeFixedList, typeStruct:
		nodes, bufs = 1, 2
		if t.id == typeFixedList || t.id == typeStruct {
			bufs = 1
		}
		for _, c := range t.children {
			n, b, ok := c.layout()
			if !ok {
				return 0, 0, false
			}
			nodes += n
			bufs += b
		}
		return nodes, bufs, true
	}
	return 0, 0, false
}

// ---------------------------------------------------------------------------
// Decoding record batches

// message is one framed IPC message inside a byte slice.
type message struct {
	hdrType int
	hdr     fbTable
	body    []byte
	size    int // prefix + metadata + body
	off     int // offset of the message in the data
	crcPos  int // offset in the data of the MetaCRC32C value, or -1
	crcBad  bool
}

// metaStart returns the offset in the data of the message's metadata
// flatbuffer, which offsets into m.hdr.b count from.
func (m *message) metaStart() int { return m.off + m.size - len(m.body) - len(m.hdr.b) }

// checkCRC checks the message's CRC32C in data. It returns errNoCRC when the
// message carries none.
func (m *message) checkCRC(data []byte) error {
	if m.crcPos < 0 {
		return errNoCRC
	}
	region := data[m.off : m.off+m.size]
	got, want, ok := crcWithPlaceholder(region, m.crcPos-m.off)
	if !ok || m.crcBad {
		return fmt.Errorf("%s value %q is not eight hex digits: %w", MetaCRC32C, region[m.crcPos-m.off:min(m.crcPos-m.off+8, len(region))], ErrCorrupt)
	}
	if got != want {
		return fmt.Errorf("CRC32C %08x, stored %08x: the data changed after it was written (bit rot, an overwrite): %w", got, want, ErrCorrupt)
	}
	return nil
}

// errNoCRC means a message or schema carries no MetaCRC32C.
var errNoCRC = fmt.Errorf("no %s: %w", MetaCRC32C, ErrCorrupt)

// readMessage parses the message at data[off:].
func readMessage(data []byte, off int) (m message, err error) {
	defer catch(&err, "read message")
	if off+8 > len(data) {
		return m, fmt.Errorf("read message at %d: truncated prefix: %w", off, ErrCorrupt)
	}
	p := off
	l := binary.LittleEndian.Uint32(data[p:])
	if l == continuation {
		p += 4
		l = binary.LittleEndian.Uint32(data[p:])
	}
	p += 4
	if l == 0 {
		return message{size: p - off, off: off, crcPos: -1}, nil // end of stream
	}
	if int64(l) > int64(len(data)-p) {
		return m, fmt.Errorf("read message at %d: metadata length %d past end of file: %w", off, l, ErrCorrupt)
	}
	meta := data[p : p+int(l)]
	p += int(l)
	t := fbRoot(meta)
	m.hdrType = int(t.u8(1, 0))
	if v := t.i16(0, 0); v < metadataV5-1 {
		return m, fmt.Errorf("read message at %d: metadata version %d too old: %w", off, v, ErrCorrupt)
	}
	bodyLen := t.i64(3, 0)
	if bodyLen < 0 || bodyLen > int64(len(data)-p) {
		return m, fmt.Errorf("read message at %d: body length %d past end of file: %w", off, bodyLen, ErrCorrupt)
	}
	t.vector(4, 4) // custom_metadata: bounds-checked before arrow-go sizes a slice by it
	m.off, m.crcPos = off, -1
	if pos, v := t.findMeta(4, MetaCRC32C); pos >= 0 {
		m.crcPos = p - int(l) + pos
		m.crcBad = len(v) != 8
	}
	hdr, ok := t.table(2)
	if !ok && m.hdrType != 0 {
		return m, fmt.Errorf("read message at %d: no header: %w", off, ErrCorrupt)
	}
	m.hdr = hdr
	m.body = data[p : p+int(bodyLen)]
	m.size = p + int(bodyLen) - off
	return m, nil
}

// decodeSlack is the spare capacity past a decoded buffer's end that lets
// klauspost/compress/zstd pick its fast sequence copies for the last block
// of a frame too (they may write up to 32 bytes past a match). Measured
// A/B (docs/BENCHMARKS.md): mixed access rows read 3.5% faster, seq 3%
// slower.
const decodeSlack = 64

// batchDecoder decodes the buffers of record batch messages into reusable
// scratch space.
type batchDecoder struct {
	zdec    *zstd.Decoder
	scratch [][]byte // per buffer index
	// last holds, per buffer index, the compressed bytes (when short) that
	// scratch was decoded from: constant columns compress to the same few
	// bytes in every batch, and are then not decoded again.
	last  [][]byte
	rows  int
	nodes []nodeMeta
	bufs  []bufMeta
	body  []byte
	zstd  bool
	total int64 // decompressed bytes of this batch so far
}

// newBatchDecoder returns a decoder that skips the zstd frame checksums;
// newCheckingDecoder's verifies them (for Repair, which must find torn
// writes). Verify checks whole files against the manifest's SHA-256.
func newBatchDecoder() *batchDecoder { return newDecoder(true) }

func newCheckingDecoder() *batchDecoder { return newDecoder(false) }

func newDecoder(ignoreChecksum bool) *batchDecoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.IgnoreChecksum(ignoreChecksum),
		zstd.WithDecoderMaxMemory(maxBufferBytes), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		panic(err)
	}
	return &batchDecoder{zdec: d}
}

// load parses a RecordBatch header (rb) and its body.
func (d *batchDecoder) load(rb fbTable, body []byte) (err error) {
	defer catch(&err, "read record batch")
	n := rb.i64(0, 0)
	if n < 0 || n > maxBatchRows {
		return fmt.Errorf("read record batch: row count %d out of range: %w", n, ErrCorrupt)
	}
	d.rows = int(n)
	ns, nn := rb.vector(1, 16)
	d.nodes = d.nodes[:0]
	for j := 0; j < nn; j++ {
		o := ns + 16*j
		d.nodes = append(d.nodes, nodeMeta{int64(binary.LittleEndian.Uint64(rb.b[o:])), int64(binary.LittleEndian.Uint64(rb.b[o+8:]))})
	}
	bs, bn := rb.vector(2, 16)
	d.bufs = d.bufs[:0]
	for j := 0; j < bn; j++ {
		o := bs + 16*j
		bm := bufMeta{int64(binary.LittleEndian.Uint64(rb.b[o:])), int64(binary.LittleEndian.Uint64(rb.b[o+8:]))}
		if bm.off < 0 || bm.len < 0 || bm.off > int64(len(body)) || bm.len > int64(len(body))-bm.off {
			return fmt.Errorf("read record batch: buffer %d (offset %d, length %d) outside body of %d bytes: %w", j, bm.off, bm.len, len(body), ErrCorrupt)
		}
		d.bufs = append(d.bufs, bm)
	}
	rb.vector(4, 8) // variadicBufferCounts
	d.zstd = false
	d.total = 0
	if c, ok := rb.table(3); ok {
		switch c.u8(0, 0) {
		case codecZstd:
			d.zstd = true
		default:
			return fmt.Errorf("read record batch: compression codec %d not supported (want zstd): %w", c.u8(0, 0), ErrCorrupt)
		}
	}
	d.body = body
	for len(d.scratch) < len(d.bufs) {
		d.scratch = append(d.scratch, nil)
		d.last = append(d.last, nil)
	}
	return nil
}

// buffer returns buffer i decoded, checking that it holds at least min and
// at most max bytes before allocating.
func (d *batchDecoder) buffer(i int, min, max int64) ([]byte, error) {
	if i >= len(d.bufs) {
		return nil, fmt.Errorf("buffer %d missing: %w", i, ErrCorrupt)
	}
	bm := d.bufs[i]
	raw := d.body[bm.off : bm.off+bm.len]
	var out []byte
	if !d.zstd || len(raw) == 0 {
		out = raw
	} else {
		if len(raw) < 8 {
			return nil, fmt.Errorf("buffer %d: compressed buffer of %d bytes lacks its length prefix: %w", i, len(raw), ErrCorrupt)
		}
		ulen := int64(binary.LittleEndian.Uint64(raw))
		if ulen == -1 {
			out = raw[8:]
		} else {
			if ulen < min || ulen > max || ulen > maxBufferBytes {
				return nil, fmt.Errorf("buffer %d: declared length %d outside [%d, %d]: %w", i, ulen, min, max, ErrCorrupt)
			}
			if d.total += ulen; d.total > maxBatchBytes {
				return nil, fmt.Errorf("buffer %d: batch decompresses to more than %d bytes: %w", i, maxBatchBytes, ErrCorrupt)
			}
			s := d.scratch[i]
			if int64(len(s)) == ulen && len(raw) <= 256 && string(d.last[i]) == string(raw) {
				out = s // same frame as the last batch: same content
			} else {
				// decodeSlack spare bytes let the zstd decoder use its
				// fast over-copying loops instead of the bounds-exact ones.
				if int64(cap(s)) < ulen+decodeSlack {
					s = make([]byte, 0, ulen+decodeSlack)
				}
				d.last[i] = d.last[i][:0]
				s, err := d.zdec.DecodeAll(raw[8:], s[:0])
				if err != nil {
					return nil, fmt.Errorf("buffer %d: zstd: %v: %w", i, err, ErrCorrupt)
				}
				if int64(len(s)) != ulen {
					return nil, fmt.Errorf("buffer %d: decompressed %d bytes, declared %d: %w", i, len(s), ulen, ErrCorrupt)
				}
				d.scratch[i] = s
				if len(raw) <= 256 {
					d.last[i] = append(d.last[i], raw...)
				}
				out = s
			}
		}
	}
	if int64(len(out)) < min {
		return nil, fmt.Errorf("buffer %d: %d bytes, need %d: %w", i, len(out), min, ErrCorrupt)
	}
	return out, nil
}
