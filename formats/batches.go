package formats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// AccessColumns selects columns of accesses.arrow for AccessBatches: a
// consumer decompresses only the columns it reads. Integrity checks cover
// every column all the same: the CRC32C of each message (format 1.1) is
// over its compressed bytes, and a 1.0 file's SHA-256 over the whole file.
type AccessColumns uint32

// Access columns, one bit each, in schema order.
const (
	ColTS AccessColumns = 1 << iota
	ColPID
	ColTID
	ColComm
	ColFileID
	ColFirstPage
	ColNPages
	ColKind
	ColEndNS
	ColOp
	ColRet
	ColProt
	ColMapFirstPage
	ColMapPages
	ColTracerNS
	ColTracerCalls

	// AllAccessColumns selects every field of Access.
	AllAccessColumns = ColTracerCalls<<1 - 1
)

// AccessBatch is one record batch of accesses.arrow, decoded column by
// column: row i of the batch is (TS[i], PID[i], ...). Columns the reader
// was not asked for are nil; columns of format 1.1 that a 1.0 file lacks
// read as zeros. The slices stay valid until the next Read into the same
// AccessBatch or until the AccessBatches is closed, and must not be
// modified. An AccessBatch keeps its decoder and buffers between Reads, so
// reusing one allocates nothing once its buffers have grown.
type AccessBatch struct {
	// Index is the batch's position in the file; Rows its row count.
	Index, Rows int
	// Same holds the columns whose contents are those of the previous
	// Read into this AccessBatch: a constant column compresses to the same
	// few bytes in every batch, is not decompressed again, and a consumer
	// may keep what it learned of it.
	Same AccessColumns

	TS, FirstPage, EndNS, Op, MapFirstPage, MapPages []uint64
	Ret                                              []int64
	PID, TID, FileID, NPages, TracerNS, TracerCalls  []uint32
	// Comm holds indexes into AccessBatches.CommDict.
	Comm []int32
	Kind []AccessKind
	Prot []uint8

	dec     *batchDecoder
	zero    zeroBuf
	commBuf []int32
}

// AccessBatches reads accesses.arrow batch by batch, decoding only the
// columns asked for. Read may be called from several goroutines at once,
// each with its own AccessBatch, so that batches decode in parallel.
type AccessBatches struct {
	tf    *tableFile
	refs  []colRef
	cols  AccessColumns
	commW int
	dict  []string
}

// AccessBatches opens accesses.arrow for reading the columns cols batch by
// batch. Each batch is checked like the cursors check it (docs/format.md,
// Integrity) when it is read; a format 1.0 file is checked whole against
// the manifest's SHA-256 here, since batches may be read in any order. The
// AccessBatches must be closed.
func (b *Bundle) AccessBatches(cols AccessColumns) (*AccessBatches, error) {
	tf, err := b.openTable(AccessesFile)
	if err != nil {
		return nil, err
	}
	r, err := newAccessBatches(tf, cols)
	if err != nil {
		tf.close()
		return nil, err
	}
	return r, nil
}

func newAccessBatches(tf *tableFile, cols AccessColumns) (*AccessBatches, error) {
	refs, err := tf.locate(accessesCols)
	if err != nil {
		return nil, err
	}
	r := &AccessBatches{tf: tf, refs: refs, cols: cols & AllAccessColumns}
	if cols&ColComm != 0 {
		r.commW = refs[acComm].typ.bitWidth / 8
		if !validIndexWidth(r.commW) {
			return nil, tf.errf("column comm: index width %d bits", refs[acComm].typ.bitWidth)
		}
		r.dict = tf.dicts[refs[acComm].typ.dictID]
	}
	if tf.sha != nil {
		// Batches may be read out of order and concurrently: check the
		// whole file now, which leaves checkBatch nothing to change.
		if err := tf.finishSHA(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Len returns the number of record batches.
func (r *AccessBatches) Len() int {
	if r.tf == nil {
		return 0
	}
	return len(r.tf.batches)
}

// Columns returns the columns the batches are read with.
func (r *AccessBatches) Columns() AccessColumns { return r.cols }

// CommDict returns the comm dictionary AccessBatch.Comm indexes (nil when
// ColComm was not asked for).
func (r *AccessBatches) CommDict() []string { return r.dict }

// Close releases the file. Batches read from it must not be used after.
func (r *AccessBatches) Close() error {
	if r.tf != nil {
		r.tf.close()
		r.tf = nil
	}
	return nil
}

// Read decodes record batch i into dst. It may be called concurrently
// with other Reads into other AccessBatches. An error names the file and
// the batch and wraps ErrCorrupt for damaged data.
func (r *AccessBatches) Read(i int, dst *AccessBatch) error {
	tf := r.tf
	if tf == nil {
		return errors.New("read accesses: batches closed")
	}
	if i < 0 || i >= len(tf.batches) {
		return fmt.Errorf("read %s: batch %d of %d", tf.name, i, len(tf.batches))
	}
	if dst.dec == nil {
		dst.dec = tf.newDecoder()
	}
	prev := dst.Rows
	*dst = AccessBatch{Index: i, dec: dst.dec, zero: dst.zero, commBuf: dst.commBuf}
	d := dst.dec
	if err := tf.loadBatch(d, i); err != nil {
		return err
	}
	if d.rows == prev {
		dst.Same = r.sameColumns(d)
	}
	if err := r.decode(dst); err != nil {
		dst.Same = 0
		return fmt.Errorf("read %s: batch %d: %w", tf.name, i, err)
	}
	dst.Rows = d.rows
	return nil
}

// sameColumns returns the wanted columns of the loaded batch whose data
// buffer is the frame the decoder decoded last time for it (so buffer
// returns the same bytes), or that the file lacks (zeros).
func (r *AccessBatches) sameColumns(d *batchDecoder) AccessColumns {
	var same AccessColumns
	for k, ref := range r.refs {
		c := AccessColumns(1) << k
		if r.cols&c == 0 {
			continue
		}
		if !ref.present() || d.sameFrame(ref.buf+1) {
			same |= c
		}
	}
	return same
}

// sameFrame reports whether buffer i is the compressed frame buffer last
// decoded for that index, whose bytes it then returns again.
func (d *batchDecoder) sameFrame(i int) bool {
	if !d.zstd || i >= len(d.bufs) || i >= len(d.scratch) {
		return false
	}
	bm := d.bufs[i]
	raw := d.body[bm.off : bm.off+bm.len]
	if len(raw) < 8 || len(raw) > 256 {
		return false
	}
	ulen := int64(binary.LittleEndian.Uint64(raw))
	return ulen >= 0 && int64(len(d.scratch[i])) == ulen && string(d.last[i]) == string(raw)
}

// decode sets dst's columns from its loaded decoder.
func (r *AccessBatches) decode(dst *AccessBatch) error {
	c := colReader{d: dst.dec, refs: r.refs, want: r.cols, zero: &dst.zero}
	dst.TS = asU64(c.col(ColTS, acTS, 8))
	dst.PID = asU32(c.col(ColPID, acPID, 4))
	dst.TID = asU32(c.col(ColTID, acTID, 4))
	dst.FileID = asU32(c.col(ColFileID, acFile, 4))
	dst.FirstPage = asU64(c.col(ColFirstPage, acPage, 8))
	dst.NPages = asU32(c.col(ColNPages, acNPages, 4))
	dst.Kind = asKinds(c.col(ColKind, acKind, 1))
	comm := c.col(ColComm, acComm, r.commW)
	dst.EndNS = asU64(c.opt(ColEndNS, acEnd, 8))
	dst.Op = asU64(c.opt(ColOp, acOp, 8))
	dst.Ret = asI64(c.opt(ColRet, acRet, 8))
	dst.Prot = c.opt(ColProt, acProt, 1)
	dst.MapFirstPage = asU64(c.opt(ColMapFirstPage, acMapFirst, 8))
	dst.MapPages = asU64(c.opt(ColMapPages, acMapPages, 8))
	dst.TracerNS = asU32(c.opt(ColTracerNS, acTracer, 4))
	dst.TracerCalls = asU32(c.opt(ColTracerCalls, acTracerCalls, 4))
	if c.err != nil {
		return c.err
	}
	if r.cols&ColComm == 0 {
		return nil
	}
	n := dst.dec.rows
	if r.commW == 4 {
		dst.Comm = asInt32(comm)[:n]
	} else {
		dst.commBuf = dst.commBuf[:0]
		for i := 0; i < n; i++ {
			dst.commBuf = append(dst.commBuf, int32(dictIndex(comm, r.commW, i)))
		}
		dst.Comm = dst.commBuf
	}
	nd := int32(len(r.dict))
	for i, ci := range dst.Comm {
		if ci < 0 || ci >= nd {
			return fmt.Errorf("row %d: comm index %d outside dictionary of %d: %w", i, ci, nd, ErrCorrupt)
		}
	}
	return nil
}

// colReader decodes the wanted columns of a loaded batch, keeping the
// first error.
type colReader struct {
	d    *batchDecoder
	refs []colRef
	want AccessColumns
	zero *zeroBuf
	err  error
}

// col decodes required column k (bit c) of width bytes, if wanted.
func (r *colReader) col(c AccessColumns, k, width int) []byte {
	if r.want&c == 0 || r.err != nil {
		return nil
	}
	b, err := fixed(r.d, r.refs[k], width)
	if err != nil {
		r.err = fmt.Errorf("column %s: %w", accessesCols.names[k], err)
	}
	return b
}

// opt decodes optional (format 1.1) column k, or zeros where the file
// lacks it.
func (r *colReader) opt(c AccessColumns, k, width int) []byte {
	if r.want&c == 0 || r.err != nil {
		return nil
	}
	b, err := r.zero.column(r.d, r.refs[k], width)
	if err != nil {
		r.err = fmt.Errorf("column %s: %w", accessesCols.names[k], err)
	}
	return b
}

// asKinds reinterprets a kind column.
func asKinds(b []byte) []AccessKind {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*AccessKind)(unsafe.Pointer(&b[0])), len(b))
}

// Access sets a to row i of the batch; fields of columns not read are 0.
func (b *AccessBatch) Access(i int, dict []string, a *Access) {
	*a = Access{}
	if b.TS != nil {
		a.TS = b.TS[i]
	}
	if b.PID != nil {
		a.PID = b.PID[i]
	}
	if b.TID != nil {
		a.TID = b.TID[i]
	}
	if b.Comm != nil && dict != nil {
		a.Comm = dict[b.Comm[i]]
	}
	if b.FileID != nil {
		a.FileID = b.FileID[i]
	}
	if b.FirstPage != nil {
		a.FirstPage = b.FirstPage[i]
	}
	if b.NPages != nil {
		a.NPages = b.NPages[i]
	}
	if b.Kind != nil {
		a.Kind = b.Kind[i]
	}
	if b.EndNS != nil {
		a.EndNS = b.EndNS[i]
	}
	if b.Op != nil {
		a.Op = b.Op[i]
	}
	if b.Ret != nil {
		a.Ret = b.Ret[i]
	}
	if b.Prot != nil {
		a.Prot = b.Prot[i]
	}
	if b.MapFirstPage != nil {
		a.MapFirstPage = b.MapFirstPage[i]
	}
	if b.MapPages != nil {
		a.MapPages = b.MapPages[i]
	}
	if b.TracerNS != nil {
		a.TracerNS = b.TracerNS[i]
	}
	if b.TracerCalls != nil {
		a.TracerCalls = b.TracerCalls[i]
	}
}
