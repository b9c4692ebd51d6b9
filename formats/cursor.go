package formats

import (
	"errors"
	"fmt"
	"unsafe"
)

// Accesses returns a cursor over accesses.arrow in file order.
func (b *Bundle) Accesses() (*AccessCursor, error) {
	tf, err := b.openTable(AccessesFile)
	if err != nil {
		return nil, err
	}
	c, err := newAccessCursor(tf)
	if err != nil {
		tf.close()
		return nil, err
	}
	return c, nil
}

// Column indexes into accessesCols.
const (
	acTS = iota
	acPID
	acTID
	acComm
	acFile
	acPage
	acNPages
	acKind
	acEnd
	acOp
	acRet
	acProt
	acMapFirst
	acMapPages
	acKindName
	acTracer
	acTracerCalls
)

func newAccessCursor(tf *tableFile) (*AccessCursor, error) {
	refs, err := tf.locate(accessesCols)
	if err != nil {
		return nil, err
	}
	c := &AccessCursor{tf: tf, dec: tf.newDecoder(), refs: refs}
	c.dict = tf.dicts[refs[acComm].typ.dictID]
	c.commW = refs[acComm].typ.bitWidth / 8
	if !validIndexWidth(c.commW) {
		return nil, tf.errf("column comm: index width %d bits", refs[acComm].typ.bitWidth)
	}
	if r := refs[acKindName]; r.present() && !validIndexWidth(r.typ.bitWidth/8) {
		return nil, tf.errf("column kind_name: index width %d bits", r.typ.bitWidth)
	}
	return c, nil
}

func validIndexWidth(w int) bool { return w == 1 || w == 2 || w == 4 || w == 8 }

// AccessCursor iterates over accesses.arrow rows. It allocates nothing per
// row: At returns the same Access, overwritten by each Next. Columns of
// format 1.1 that a 1.0 file lacks read as 0.
type AccessCursor struct {
	tf    *tableFile
	dec   *batchDecoder
	refs  []colRef
	batch int
	i, n  int

	ts, page, end, op, mapFirst, mapPages []uint64
	ret                                   []int64
	pid, tid, file, npg, tracer, calls    []uint32
	comm                                  []int32
	commBuf                               []int32 // comm indices converted from other widths
	commW                                 int
	kind, prot                            []byte
	dict                                  []string
	zero                                  zeroBuf

	// withKindName makes load check kind_name against kind (for Verify).
	withKindName bool
	kindNameErrs uint64

	cur Access
	err error
}

// Next advances to the next row. It returns false at the end or on error;
// check Err.
func (c *AccessCursor) Next() bool {
	i := c.i
	if i >= c.n {
		if !c.advance() {
			return false
		}
		i = 0
	}
	c.i = i + 1
	a := &c.cur
	a.TS = c.ts[i]
	a.PID = c.pid[i]
	a.TID = c.tid[i]
	a.Comm = c.dict[c.comm[i]] // indices checked by load
	a.FileID = c.file[i]
	a.FirstPage = c.page[i]
	a.NPages = c.npg[i]
	a.Kind = AccessKind(c.kind[i])
	a.EndNS = c.end[i]
	a.Op = c.op[i]
	a.Ret = c.ret[i]
	a.Prot = c.prot[i]
	a.MapFirstPage = c.mapFirst[i]
	a.MapPages = c.mapPages[i]
	a.TracerNS = c.tracer[i]
	a.TracerCalls = c.calls[i]
	return true
}

// advance loads the next non-empty batch.
func (c *AccessCursor) advance() bool {
	for {
		if c.err != nil || c.tf == nil || c.batch >= len(c.tf.batches) {
			c.i, c.n = 0, 0
			return false
		}
		if err := c.load(c.batch); err != nil {
			c.err = err
			c.i, c.n = 0, 0
			return false
		}
		c.batch++
		if c.n > 0 {
			return true
		}
	}
}

func (c *AccessCursor) load(bi int) error {
	d := c.dec
	if err := c.tf.loadBatch(d, bi); err != nil {
		return err
	}
	r := c.refs
	z := &c.zero
	ts, e1 := fixed(d, r[acTS], 8)
	pid, e2 := fixed(d, r[acPID], 4)
	tid, e3 := fixed(d, r[acTID], 4)
	comm, e4 := fixed(d, r[acComm], c.commW)
	file, e5 := fixed(d, r[acFile], 4)
	page, e6 := fixed(d, r[acPage], 8)
	npg, e7 := fixed(d, r[acNPages], 4)
	kind, e8 := fixed(d, r[acKind], 1)
	if err := errors.Join(e1, e2, e3, e4, e5, e6, e7, e8); err != nil {
		return fmt.Errorf("read %s: batch %d: %w", c.tf.name, bi, err)
	}
	// Optional columns come last: each may share the one zero buffer.
	end, e9 := z.column(d, r[acEnd], 8)
	op, e10 := z.column(d, r[acOp], 8)
	ret, e11 := z.column(d, r[acRet], 8)
	prot, e12 := z.column(d, r[acProt], 1)
	mapFirst, e13 := z.column(d, r[acMapFirst], 8)
	mapPages, e14 := z.column(d, r[acMapPages], 8)
	tracer, e15 := z.column(d, r[acTracer], 4)
	calls, e16 := z.column(d, r[acTracerCalls], 4)
	if err := errors.Join(e9, e10, e11, e12, e13, e14, e15, e16); err != nil {
		return fmt.Errorf("read %s: batch %d: %w", c.tf.name, bi, err)
	}
	n := d.rows
	if c.commW == 4 {
		c.comm = asInt32(comm)
	} else {
		c.commBuf = c.commBuf[:0]
		for i := 0; i < n; i++ {
			c.commBuf = append(c.commBuf, int32(dictIndex(comm, c.commW, i)))
		}
		c.comm = c.commBuf
	}
	nd := int32(len(c.dict))
	for i, ci := range c.comm[:n] {
		if ci < 0 || ci >= nd {
			return fmt.Errorf("read %s: batch %d row %d: comm index %d outside dictionary of %d: %w", c.tf.name, bi, i, ci, nd, ErrCorrupt)
		}
	}
	if c.withKindName {
		if err := c.checkKindNames(bi, kind); err != nil {
			return err
		}
	}
	c.ts, c.pid, c.tid, c.file, c.page, c.npg, c.kind = asU64(ts), asU32(pid), asU32(tid), asU32(file), asU64(page), asU32(npg), kind
	c.end, c.op, c.ret, c.prot, c.mapFirst, c.mapPages = asU64(end), asU64(op), asI64(ret), prot, asU64(mapFirst), asU64(mapPages)
	c.tracer, c.calls = asU32(tracer), asU32(calls)
	c.i, c.n = 0, n
	return nil
}

// checkKindNames counts the rows of batch bi whose kind_name disagrees
// with kind (the name of an undefined kind is UndefinedKindName).
func (c *AccessCursor) checkKindNames(bi int, kind []byte) error {
	r := c.refs[acKindName]
	if !r.present() {
		return nil
	}
	w := r.typ.bitWidth / 8
	idx, err := fixed(c.dec, r, w)
	if err != nil {
		return fmt.Errorf("read %s: batch %d: column kind_name: %w", c.tf.name, bi, err)
	}
	dict := c.tf.dicts[r.typ.dictID]
	for i, k := range kind {
		j := dictIndex(idx, w, i)
		want := AccessKind(k)
		name := UndefinedKindName
		if want.Valid() {
			name = want.String()
		}
		if j < 0 || j >= len(dict) || dict[j] != name {
			c.kindNameErrs++
		}
	}
	return nil
}

// At returns the current row, valid until the next call to Next.
func (c *AccessCursor) At() *Access { return &c.cur }

// Err returns the first error met.
func (c *AccessCursor) Err() error { return c.err }

// Close releases the cursor.
func (c *AccessCursor) Close() error {
	if c.tf != nil {
		c.tf.close()
		c.tf = nil
	}
	c.n, c.i = 0, 0
	return nil
}

func asI64(b []byte) []int64 {
	u := asU64(b)
	if len(u) == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&u[0])), len(u))
}

// Hints returns a cursor over hints.arrow. A bundle without hints.arrow has
// no hints: the cursor is empty.
func (b *Bundle) Hints() (*HintCursor, error) {
	if !b.hasHints() {
		return &HintCursor{}, nil
	}
	tf, err := b.openTable(HintsFile)
	if err != nil {
		return nil, err
	}
	c, err := newHintCursor(tf)
	if err != nil {
		tf.close()
		return nil, err
	}
	return c, nil
}

// Column indexes into hintsCols.
const (
	hcTS = iota
	hcPID
	hcKind
	hcFile
	hcParent
	hcPos
	hcChildren
	hcName
	hcOff
	hcLen
	hcTID
	hcSource
	hcKindName
)

func newHintCursor(tf *tableFile) (*HintCursor, error) {
	refs, err := tf.locate(hintsCols)
	if err != nil {
		return nil, err
	}
	c := &HintCursor{tf: tf, dec: tf.newDecoder(), refs: refs, names: map[string]string{}}
	if r := refs[hcSource]; r.present() {
		c.srcW = r.typ.bitWidth / 8
		if !validIndexWidth(c.srcW) {
			return nil, tf.errf("column source: index width %d bits", r.typ.bitWidth)
		}
		c.srcDict = tf.dicts[r.typ.dictID]
	}
	return c, nil
}

// HintCursor iterates over hints.arrow rows. At returns the same Hint,
// overwritten by each Next; its Children slice is reused. Columns of format
// 1.1 that a 1.0 file lacks read as 0 (Source as "").
type HintCursor struct {
	tf    *tableFile
	dec   *batchDecoder
	refs  []colRef
	batch int
	i, n  int

	hintCols // the current batch's columns, as the Writer buffers them
	names    map[string]string
	srcW     int
	srcIdx   []byte
	srcDict  []string
	zero     zeroBuf

	cur Hint
	err error
}

// Next advances to the next row. It returns false at the end or on error.
func (c *HintCursor) Next() bool {
	for c.i >= c.n {
		if c.err != nil || c.tf == nil || c.batch >= len(c.tf.batches) {
			return false
		}
		if err := c.load(c.batch); err != nil {
			c.err = err
			return false
		}
		c.batch++
	}
	i := c.i
	c.i++
	h := &c.cur
	h.TS = c.ts[i]
	h.PID = c.pid[i]
	h.Kind = HintKind(c.kind[i])
	h.FileID = c.file[i]
	h.ParentPage = c.parent[i]
	h.Position = c.pos[i]
	h.Children = append(h.Children[:0], c.children[c.childOff[i]:c.childOff[i+1]]...)
	nb := c.nameData[c.nameOff[i]:c.nameOff[i+1]]
	if s, ok := c.names[string(nb)]; ok {
		h.Name = s
	} else {
		h.Name = string(nb)
		if len(c.names) < 4096 {
			c.names[h.Name] = h.Name
		}
	}
	h.OffsetBytes = c.off[i]
	h.LengthBytes = c.length[i]
	h.TID = c.tid[i]
	h.Source = ""
	if c.srcW > 0 {
		h.Source = c.srcDict[dictIndex(c.srcIdx, c.srcW, i)] // checked by load
	}
	return true
}

func (c *HintCursor) load(bi int) error {
	d := c.dec
	if err := c.tf.loadBatch(d, bi); err != nil {
		return err
	}
	r := c.refs
	n := d.rows
	ts, e1 := fixed(d, r[hcTS], 8)
	pid, e2 := fixed(d, r[hcPID], 4)
	kind, e3 := fixed(d, r[hcKind], 1)
	file, e4 := fixed(d, r[hcFile], 4)
	parent, e5 := fixed(d, r[hcParent], 8)
	pos, e6 := fixed(d, r[hcPos], 4)
	off, e7 := fixed(d, r[hcOff], 8)
	length, e8 := fixed(d, r[hcLen], 8)
	tid, e9 := c.zero.column(d, r[hcTID], 4)
	if err := errors.Join(e1, e2, e3, e4, e5, e6, e7, e8, e9, checkNode(d, r[hcChildren].node, n), checkNode(d, r[hcName].node, n)); err != nil {
		return fmt.Errorf("read %s: batch %d: %w", c.tf.name, bi, err)
	}
	if c.srcW > 0 {
		src, err := fixed(d, r[hcSource], c.srcW)
		if err != nil {
			return fmt.Errorf("read %s: batch %d: column source: %w", c.tf.name, bi, err)
		}
		for i := 0; i < n; i++ {
			if j := dictIndex(src, c.srcW, i); j < 0 || j >= len(c.srcDict) {
				return fmt.Errorf("read %s: batch %d row %d: source index %d outside dictionary of %d: %w", c.tf.name, bi, i, j, len(c.srcDict), ErrCorrupt)
			}
		}
		c.srcIdx = src
	}
	// children: list offsets, then the child node and its values.
	minOff := int64(n+1) * 4
	if n == 0 {
		minOff = 0
	}
	cob, err := d.buffer(r[hcChildren].buf+1, minOff, int64(n+1)*4+64)
	if err != nil {
		return fmt.Errorf("read %s: batch %d: column children: %w", c.tf.name, bi, err)
	}
	childOff := []int32{0}
	if n > 0 || len(cob) >= 4 {
		childOff = asInt32(cob)[:n+1]
	}
	nchild := int(childOff[n])
	if nchild < 0 || nchild > maxBufferBytes/8 {
		return c.tf.errf("batch %d: column children: %d values", bi, nchild)
	}
	if err := checkNodeLen(d, r[hcChildren].node+1, nchild); err != nil {
		return fmt.Errorf("read %s: batch %d: column children: %w", c.tf.name, bi, err)
	}
	cv, err := d.buffer(r[hcChildren].buf+3, int64(nchild)*8, int64(nchild)*8+64)
	if err != nil {
		return fmt.Errorf("read %s: batch %d: column children: %w", c.tf.name, bi, err)
	}
	if err := checkOffsets(childOff, nchild); err != nil {
		return fmt.Errorf("read %s: batch %d: column children: %w", c.tf.name, bi, err)
	}
	nameOff, nameData, err := decodeUtf8(d, r[hcName].buf, n)
	if err != nil {
		return fmt.Errorf("read %s: batch %d: column name: %w", c.tf.name, bi, err)
	}
	c.ts, c.pid, c.kind, c.file, c.parent, c.pos = asU64(ts), asU32(pid), kind, asU32(file), asU64(parent), asU32(pos)
	c.off, c.length, c.tid = asU64(off), asU64(length), asU32(tid)
	c.childOff, c.children = childOff, asU64(cv[:nchild*8])
	c.nameOff, c.nameData = nameOff, nameData
	c.i, c.n = 0, n
	return nil
}

func checkNodeLen(dec *batchDecoder, n, rows int) error {
	if n >= len(dec.nodes) {
		return fmt.Errorf("field node %d missing: %w", n, ErrCorrupt)
	}
	if dec.nodes[n].len != int64(rows) || dec.nodes[n].nulls != 0 {
		return fmt.Errorf("field node %d: %d values (%d null), want %d non-null: %w", n, dec.nodes[n].len, dec.nodes[n].nulls, rows, ErrCorrupt)
	}
	return nil
}

// At returns the current row, valid until the next call to Next.
func (c *HintCursor) At() *Hint { return &c.cur }

// Err returns the first error met.
func (c *HintCursor) Err() error { return c.err }

// Close releases the cursor.
func (c *HintCursor) Close() error {
	if c.tf != nil {
		c.tf.close()
		c.tf = nil
	}
	c.n, c.i = 0, 0
	return nil
}
