package formats

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// block locates one message in a table file (format/File.fbs Block).
type block struct {
	off     int64
	metaLen int32
	bodyLen int64
}

// tableFile is one Arrow IPC file mapped into memory.
type tableFile struct {
	name    string // file name inside the bundle, for errors
	data    []byte
	mapped  bool
	fields  []colField
	meta    map[string]string
	batches []block
	dicts   map[int64][]string
}

// openTableFile maps path and parses its footer, schema and dictionaries.
func openTableFile(path, name string) (*tableFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	tf := &tableFile{name: name}
	if st.Size() > 0 {
		if st.Size() > 1<<40 {
			return nil, fmt.Errorf("open %s: %d bytes is too large: %w", name, st.Size(), ErrCorrupt)
		}
		tf.data, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("open %s: mmap: %w", name, err)
		}
		tf.mapped = true
	}
	if err := tf.parse(); err != nil {
		tf.close()
		return nil, err
	}
	return tf, nil
}

// newTableFileBytes parses a table file held in memory.
func newTableFileBytes(data []byte, name string) (*tableFile, error) {
	tf := &tableFile{name: name, data: data}
	if err := tf.parse(); err != nil {
		return nil, err
	}
	return tf, nil
}

func (tf *tableFile) close() {
	if tf.mapped && tf.data != nil {
		unix.Munmap(tf.data)
	}
	tf.data = nil
}

func (tf *tableFile) errf(format string, args ...any) error {
	return fmt.Errorf("read %s: "+format+": %w", append(append([]any{tf.name}, args...), ErrCorrupt)...)
}

func (tf *tableFile) parse() (err error) {
	defer catch(&err, "read "+tf.name)
	d := tf.data
	if len(d) < 8+4+6 || string(d[:6]) != "ARROW1" || string(d[len(d)-6:]) != "ARROW1" {
		if len(d) >= 6 && string(d[:6]) == "ARROW1" {
			return tf.errf("no Arrow file footer (%d bytes); the writer may have been killed: run 'predictio trace repair'", len(d))
		}
		return tf.errf("not an Arrow IPC file (bad magic)")
	}
	flen := int64(int32(binary.LittleEndian.Uint32(d[len(d)-10:])))
	fend := int64(len(d) - 10)
	if flen <= 0 || flen > fend-8 {
		return tf.errf("footer length %d out of range", flen)
	}
	footer := d[fend-flen : fend]
	ft := fbRoot(footer)
	st, ok := ft.table(1)
	if !ok {
		return tf.errf("footer has no schema")
	}
	tf.fields, tf.meta = parseSchema(st)
	readBlocks := func(field int) ([]block, error) {
		start, n := ft.vector(field, 24)
		out := make([]block, 0, n)
		for j := 0; j < n; j++ {
			o := start + 24*j
			b := block{
				off:     int64(binary.LittleEndian.Uint64(footer[o:])),
				metaLen: int32(binary.LittleEndian.Uint32(footer[o+8:])),
				bodyLen: int64(binary.LittleEndian.Uint64(footer[o+16:])),
			}
			if b.off < 8 || b.metaLen < 8 || b.bodyLen < 0 || b.off > fend || int64(b.metaLen) > fend-b.off || b.bodyLen > fend-b.off-int64(b.metaLen) {
				return nil, tf.errf("block %d (offset %d) outside the file", j, b.off)
			}
			out = append(out, b)
		}
		return out, nil
	}
	dblocks, err := readBlocks(2)
	if err != nil {
		return err
	}
	if tf.batches, err = readBlocks(3); err != nil {
		return err
	}
	tf.dicts = map[int64][]string{}
	dec := newBatchDecoder()
	for j, b := range dblocks {
		m, err := readMessage(d, int(b.off))
		if err != nil {
			return fmt.Errorf("read %s: dictionary %d: %w", tf.name, j, err)
		}
		if err := tf.addDictionary(dec, m); err != nil {
			return err
		}
	}
	return nil
}

// maxDictEntries bounds a dictionary with its deltas (a variable for tests).
var maxDictEntries int64 = maxBatchRows

// addDictionary applies a DictionaryBatch message.
func (tf *tableFile) addDictionary(dec *batchDecoder, m message) (err error) {
	defer catch(&err, "read "+tf.name+": dictionary")
	if m.hdrType != msgDictionaryBatch {
		return tf.errf("dictionary block holds message type %d", m.hdrType)
	}
	id := m.hdr.i64(0, 0)
	rb, ok := m.hdr.table(1)
	if !ok {
		return tf.errf("dictionary %d has no data", id)
	}
	if err := dec.load(rb, m.body); err != nil {
		return fmt.Errorf("read %s: dictionary %d: %w", tf.name, id, err)
	}
	delta := m.hdr.u8(2, 0) != 0
	// Each message is bounded by maxBatchRows; deltas must be too, or a
	// small file of many compressed deltas expands to gigabytes.
	if n := int64(dec.rows); delta && int64(len(tf.dicts[id]))+n > maxDictEntries {
		return tf.errf("dictionary %d: delta of %d entries makes %d, more than %d", id, n, int64(len(tf.dicts[id]))+n, maxDictEntries)
	}
	vals, err := decodeStrings(dec, 0, 0)
	if err != nil {
		return fmt.Errorf("read %s: dictionary %d: %w", tf.name, id, err)
	}
	if delta {
		tf.dicts[id] = append(tf.dicts[id], vals...)
	} else {
		tf.dicts[id] = vals
	}
	return nil
}

// decodeStrings decodes a utf8 column at node n, buffers b..b+2, as strings.
func decodeStrings(dec *batchDecoder, n, b int) ([]string, error) {
	rows := dec.rows
	if err := checkNode(dec, n, rows); err != nil {
		return nil, err
	}
	offs, data, err := decodeUtf8(dec, b, rows)
	if err != nil {
		return nil, err
	}
	out := make([]string, rows)
	for i := range out {
		out[i] = string(data[offs[i]:offs[i+1]])
	}
	return out, nil
}

func checkNode(dec *batchDecoder, n, rows int) error {
	if n >= len(dec.nodes) {
		return fmt.Errorf("field node %d missing: %w", n, ErrCorrupt)
	}
	if dec.nodes[n].len != int64(rows) {
		return fmt.Errorf("field node %d has %d rows, batch has %d: %w", n, dec.nodes[n].len, rows, ErrCorrupt)
	}
	if dec.nodes[n].nulls != 0 {
		return fmt.Errorf("field node %d has %d nulls; bundle columns are not nullable: %w", n, dec.nodes[n].nulls, ErrCorrupt)
	}
	return nil
}

// decodeUtf8 decodes validated offsets and data of a utf8 column.
func decodeUtf8(dec *batchDecoder, b, rows int) ([]int32, []byte, error) {
	minOff := int64(rows+1) * 4
	if rows == 0 {
		minOff = 0
	}
	ob, err := dec.buffer(b+1, minOff, int64(rows+1)*4+64)
	if err != nil {
		return nil, nil, err
	}
	if rows == 0 && len(ob) < 4 {
		return []int32{0}, nil, nil
	}
	offs := asInt32(ob)[:rows+1]
	data, err := dec.buffer(b+2, int64(offs[rows]), maxBufferBytes)
	if err != nil {
		return nil, nil, err
	}
	if err := checkOffsets(offs, len(data)); err != nil {
		return nil, nil, err
	}
	return offs, data, nil
}

func checkOffsets(offs []int32, n int) error {
	prev := int32(0)
	if len(offs) > 0 {
		prev = offs[0]
	}
	if prev < 0 {
		return fmt.Errorf("negative offset: %w", ErrCorrupt)
	}
	for _, o := range offs {
		if o < prev || int(o) > n {
			return fmt.Errorf("offset %d out of order or past %d bytes: %w", o, n, ErrCorrupt)
		}
		prev = o
	}
	return nil
}

// colRef locates a column's first node and buffer in each record batch.
type colRef struct {
	node, buf int
	typ       colType
}

// locate finds the required columns by name, checking their types.
func (tf *tableFile) locate(names []string, want []colType) ([]colRef, error) {
	refs := make([]colRef, len(names))
	found := make([]bool, len(names))
	node, buf := 0, 0
	var blocked string
	for _, f := range tf.fields {
		for i, n := range names {
			if n == f.name && !found[i] {
				if blocked != "" {
					return nil, tf.errf("column %q follows column %q of a type this reader cannot skip (%s)", n, blocked, f.typ)
				}
				if !compatible(f.typ, want[i]) {
					return nil, tf.errf("column %s has type %s, want %s", n, f.typ, want[i])
				}
				refs[i] = colRef{node: node, buf: buf, typ: f.typ}
				found[i] = true
			}
		}
		nn, nb, ok := f.typ.layout()
		if !ok && blocked == "" {
			blocked = f.name
		}
		node += nn
		buf += nb
	}
	var missing []string
	for i, ok := range found {
		if !ok {
			missing = append(missing, names[i])
		}
	}
	if len(missing) > 0 {
		return nil, tf.errf("missing column(s) %v", missing)
	}
	return refs, nil
}

// loadBatch decodes the header of record batch i into dec.
func (tf *tableFile) loadBatch(dec *batchDecoder, i int) error {
	b := tf.batches[i]
	m, err := readMessage(tf.data, int(b.off))
	if err != nil {
		return fmt.Errorf("read %s: batch %d: %w", tf.name, i, err)
	}
	if m.hdrType != msgRecordBatch {
		return tf.errf("batch %d: block holds message type %d", i, m.hdrType)
	}
	if err := dec.load(m.hdr, m.body); err != nil {
		return fmt.Errorf("read %s: batch %d: %w", tf.name, i, err)
	}
	return nil
}

// fixed returns the data buffer of a fixed-width column of width bytes.
func fixed(dec *batchDecoder, r colRef, width int) ([]byte, error) {
	if err := checkNode(dec, r.node, dec.rows); err != nil {
		return nil, err
	}
	n := int64(dec.rows) * int64(width)
	b, err := dec.buffer(r.buf+1, n, n+64)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}

func aligned(b []byte, a uintptr) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%a == 0
}

func asU64(b []byte) []uint64 {
	if len(b) < 8 {
		return nil
	}
	if !aligned(b, 8) {
		c := make([]uint64, len(b)/8)
		for i := range c {
			c[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		return c
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
}

func asU32(b []byte) []uint32 {
	if len(b) < 4 {
		return nil
	}
	if !aligned(b, 4) {
		c := make([]uint32, len(b)/4)
		for i := range c {
			c[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
		return c
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func asInt32(b []byte) []int32 {
	u := asU32(b)
	if len(u) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&u[0])), len(u))
}

// dictIndex reads dictionary index i of width bytes.
func dictIndex(b []byte, width, i int) int {
	switch width {
	case 1:
		return int(int8(b[i]))
	case 2:
		return int(int16(binary.LittleEndian.Uint16(b[2*i:])))
	case 4:
		return int(int32(binary.LittleEndian.Uint32(b[4*i:])))
	default:
		return int(int64(binary.LittleEndian.Uint64(b[8*i:])))
	}
}
