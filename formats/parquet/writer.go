// Package parquet writes Arrow record batches as Parquet files: the
// columns of predictio's bundles (integers, strings, string dictionaries,
// lists of integers), zstd-compressed, with the Arrow schema stored in the
// file's metadata (ARROW:schema), so that Arrow readers restore the exact
// types.
//
// It writes data pages v1: integers DELTA_BINARY_PACKED (8-bit ones, small
// enums, dictionary-encoded; list elements PLAIN), strings PLAIN, string
// dictionaries RLE_DICTIONARY, one dictionary per column chunk. Columns are required:
// a null value is an error. It replaces arrow-go's pqarrow, whose compute
// kernels doubled the size of the predictio binary (and the pages a cold
// start reads).
package parquet

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/klauspost/compress/zstd"
)

// magic starts and ends a Parquet file.
const magic = "PAR1"

// Options are a Writer's settings; zero values take the defaults.
type Options struct {
	// RowGroupRows is the number of rows per row group (default 1 Mi).
	RowGroupRows int
	// PageRows is the number of rows per data page (default 64 Ki).
	PageRows int
	// CreatedBy names the writer in the file's metadata.
	CreatedBy string
}

// Writer writes one Parquet file.
type Writer struct {
	out    io.Writer
	pos    int64
	schema *arrow.Schema
	cols   []*column
	opt    Options
	zstd   *zstd.Encoder
	s      scratch

	pageFill int // rows in the pages being filled
	rows     int // rows in the current row group
	total    int64
	groups   []rowGroup
	err      error
}

type rowGroup struct {
	rows, bytes, compressed, offset int64
	chunks                          []chunk
}

type chunk struct {
	offset, dictOffset, dataOffset int64 // dictOffset < 0: none
	numValues, uncompressed, size  int64
	encodings                      []int32
}

// NewWriter starts a Parquet file of schema sc on out, writing its magic.
func NewWriter(out io.Writer, sc *arrow.Schema, opt Options) (*Writer, error) {
	if opt.RowGroupRows <= 0 {
		opt.RowGroupRows = 1 << 20
	}
	if opt.PageRows <= 0 {
		opt.PageRows = 1 << 16
	}
	w := &Writer{out: out, schema: sc, opt: opt}
	for _, f := range sc.Fields() {
		c, err := newColumn(f)
		if err != nil {
			return nil, fmt.Errorf("parquet schema: %w", err)
		}
		w.cols = append(w.cols, c)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	w.zstd = enc
	if err := w.write([]byte(magic)); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	n, err := w.out.Write(b)
	w.pos += int64(n)
	if err != nil {
		w.err = fmt.Errorf("write parquet: %w", err)
	}
	return w.err
}

// Write appends the rows of rec, whose schema must have the Writer's
// fields.
func (w *Writer) Write(rec arrow.RecordBatch) error {
	if w.err != nil {
		return w.err
	}
	if !sameFields(rec.Schema(), w.schema) {
		return errors.New("write parquet: the batch's schema differs from the file's")
	}
	n := int(rec.NumRows())
	for off := 0; off < n; {
		k := min(n-off, w.opt.PageRows-w.pageFill, w.opt.RowGroupRows-w.rows)
		for i, c := range w.cols {
			if err := c.add(rec.Column(i), off, off+k); err != nil {
				w.err = fmt.Errorf("write parquet: %w", err)
				return w.err
			}
		}
		off += k
		w.pageFill += k
		w.rows += k
		if w.pageFill == w.opt.PageRows {
			w.flushPages()
		}
		if w.rows == w.opt.RowGroupRows {
			if err := w.flushRowGroup(); err != nil {
				return err
			}
		}
	}
	return w.err
}

// sameFields reports whether a and b have the same fields (their metadata
// may differ).
func sameFields(a, b *arrow.Schema) bool {
	if a.NumFields() != b.NumFields() {
		return false
	}
	for i := range a.NumFields() {
		if !arrow.TypeEqual(a.Field(i).Type, b.Field(i).Type) || a.Field(i).Name != b.Field(i).Name {
			return false
		}
	}
	return true
}

// flushPages ends the pages being filled: each is encoded, compressed and
// kept in its column's chunk.
func (w *Writer) flushPages() {
	if w.pageFill == 0 {
		return
	}
	for _, c := range w.cols {
		w.s.body = c.encodePage(w.s.body[:0], &w.s)
		w.s.comp = w.zstd.EncodeAll(w.s.body, w.s.comp[:0])
		var h thrift
		pageHeader(&h, pageData, len(w.s.body), len(w.s.comp), func(t *thrift) {
			t.begin(5) // data_page_header
			t.i32(1, int32(c.levels))
			t.i32(2, c.encoding())
			t.i32(3, encRLE)
			t.i32(4, encRLE)
			t.end()
		})
		c.pages = append(append(c.pages, h.b...), w.s.comp...)
		c.uncompressed += int64(len(h.b) + len(w.s.body))
		c.numValues += int64(c.levels)
		c.resetPage()
	}
	w.pageFill = 0
}

// pageHeader writes a PageHeader; body writes its type's own header.
func pageHeader(t *thrift, typ int32, uncompressed, compressed int, body func(*thrift)) {
	t.begin(0)
	t.i32(1, typ)
	t.i32(2, int32(uncompressed))
	t.i32(3, int32(compressed))
	body(t)
	t.end()
}

// flushRowGroup writes the row group's column chunks.
func (w *Writer) flushRowGroup() error {
	w.flushPages()
	if w.rows == 0 {
		return w.err
	}
	g := rowGroup{rows: int64(w.rows), offset: w.pos}
	for _, c := range w.cols {
		ch, err := w.writeChunk(c)
		if err != nil {
			return err
		}
		g.bytes += ch.uncompressed
		g.compressed += ch.size
		g.chunks = append(g.chunks, ch)
	}
	w.groups = append(w.groups, g)
	w.total += int64(w.rows)
	w.rows = 0
	return nil
}

// writeChunk writes column c's chunk: its dictionary page, if any, then
// its data pages.
func (w *Writer) writeChunk(c *column) (chunk, error) {
	ch := chunk{offset: w.pos, dictOffset: -1, numValues: c.numValues}
	switch c.encoding() {
	case encRLEDict:
		ch.encodings = []int32{encPlain, encRLE, encRLEDict}
	case encPlain:
		ch.encodings = []int32{encPlain, encRLE}
	default:
		ch.encodings = []int32{encDelta, encRLE}
	}
	if c.dict {
		w.s.comp = w.zstd.EncodeAll(c.dictPlain, w.s.comp[:0])
		var h thrift
		pageHeader(&h, pageDict, len(c.dictPlain), len(w.s.comp), func(t *thrift) {
			t.begin(7) // dictionary_page_header
			t.i32(1, int32(c.ndict))
			t.i32(2, encPlain)
			t.end()
		})
		ch.dictOffset = w.pos
		ch.uncompressed += int64(len(h.b) + len(c.dictPlain))
		w.write(h.b)
		w.write(w.s.comp)
	}
	ch.dataOffset = w.pos
	ch.uncompressed += c.uncompressed
	err := w.write(c.pages)
	ch.size = w.pos - ch.offset
	c.resetChunk()
	return ch, err
}

// Close writes the last row group and the footer. It does not close the
// io.Writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if err := w.flushRowGroup(); err != nil {
		return err
	}
	meta, err := w.footer()
	if err != nil {
		return err
	}
	w.write(meta)
	w.write(binary.LittleEndian.AppendUint32(nil, uint32(len(meta))))
	w.write([]byte(magic))
	w.zstd.Close()
	if w.err == nil {
		w.err = errors.New("parquet writer closed")
		return nil
	}
	return w.err
}

// footer encodes the FileMetaData.
func (w *Writer) footer() ([]byte, error) {
	stored, err := storedSchema(w.schema)
	if err != nil {
		return nil, err
	}
	var t thrift
	t.begin(0)
	t.i32(1, 2) // version
	w.schemaElements(&t)
	t.i64(3, w.total)
	t.list(4, ctStruct, len(w.groups))
	for i, g := range w.groups {
		w.rowGroupMeta(&t, g, i)
	}
	md := w.schema.Metadata()
	t.list(5, ctStruct, md.Len()+1)
	for i, k := range md.Keys() {
		keyValue(&t, k, md.Values()[i])
	}
	keyValue(&t, "ARROW:schema", stored)
	if w.opt.CreatedBy != "" {
		t.str(6, w.opt.CreatedBy)
	}
	t.end()
	return t.b, nil
}

func keyValue(t *thrift, k, v string) {
	t.begin(0)
	t.str(1, k)
	t.str(2, v)
	t.end()
}

// schemaElements writes the flattened schema: the root, then each field
// (a list as its LIST group, the repeated group and the element).
func (w *Writer) schemaElements(t *thrift) {
	n := 1
	for _, c := range w.cols {
		n += len(c.path)
	}
	t.list(2, ctStruct, n)
	t.begin(0)
	t.str(4, "schema")
	t.i32(5, int32(len(w.cols)))
	t.end()
	for _, c := range w.cols {
		if c.list {
			t.begin(0)
			t.i32(3, required)
			t.str(4, c.name)
			t.i32(5, 1)
			t.i32(6, convList)
			t.begin(10)
			t.begin(3) // LIST
			t.end()
			t.end()
			t.end()
			t.begin(0)
			t.i32(3, repeated)
			t.str(4, listGroupName)
			t.i32(5, 1)
			t.end()
		}
		leafElement(t, c)
	}
}

// leafElement writes the SchemaElement of c's leaf.
func leafElement(t *thrift, c *column) {
	t.begin(0)
	t.i32(1, c.phys)
	t.i32(3, required)
	t.str(4, c.path[len(c.path)-1])
	t.i32(6, c.converted)
	t.begin(10) // logicalType
	if c.str {
		t.begin(1) // STRING
		t.end()
	} else {
		t.begin(10) // INTEGER
		t.i8(1, c.bitWidth)
		t.bool(2, c.signed)
		t.end()
	}
	t.end()
	t.end()
}

// rowGroupMeta writes row group g (the i-th) and its column chunks.
func (w *Writer) rowGroupMeta(t *thrift, g rowGroup, i int) {
	t.begin(0)
	t.list(1, ctStruct, len(g.chunks))
	for j, ch := range g.chunks {
		c := w.cols[j]
		t.begin(0)
		t.i64(2, ch.offset)
		t.begin(3) // meta_data
		t.i32(1, c.phys)
		t.list(2, ctI32, len(ch.encodings))
		for _, e := range ch.encodings {
			t.element(e)
		}
		t.list(3, ctBinary, len(c.path))
		for _, p := range c.path {
			t.bin(p)
		}
		t.i32(4, codecZstd)
		t.i64(5, ch.numValues)
		t.i64(6, ch.uncompressed)
		t.i64(7, ch.size)
		t.i64(9, ch.dataOffset)
		if ch.dictOffset >= 0 {
			t.i64(11, ch.dictOffset)
		}
		t.end()
		t.end()
	}
	t.i64(2, g.bytes)
	t.i64(3, g.rows)
	t.i64(5, g.offset)
	t.i64(6, g.compressed)
	t.field(7, 4) // ordinal, an i16
	t.b = binary.AppendVarint(t.b, int64(i))
	t.end()
}

// storedSchema is the ARROW:schema value: the Arrow IPC schema message,
// base64, with list elements named and typed as the Parquet columns are
// (required "element").
func storedSchema(sc *arrow.Schema) (string, error) {
	fields := make([]arrow.Field, sc.NumFields())
	for i, f := range sc.Fields() {
		if l, ok := f.Type.(*arrow.ListType); ok {
			f.Type = arrow.ListOfField(arrow.Field{Name: elementName, Type: l.Elem()})
		}
		fields[i] = f
	}
	md := sc.Metadata()
	var buf bytes.Buffer
	iw := ipc.NewWriter(&buf, ipc.WithSchema(arrow.NewSchema(fields, &md)))
	if err := iw.Close(); err != nil {
		return "", fmt.Errorf("encode the arrow schema: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}
