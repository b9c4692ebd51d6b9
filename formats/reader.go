package formats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// maxManifestBytes bounds manifest.json.
const maxManifestBytes = 64 << 20

// Bundle is an open trace bundle. Its methods may be called from one
// goroutine at a time; cursors are independent of each other.
type Bundle struct {
	dir string
	man Manifest
}

// Open opens the bundle in dir and reads its manifest. It rejects a bundle
// whose major format version differs from FormatVersion's with an error
// wrapping ErrVersion that names both versions.
func Open(dir string) (*Bundle, error) {
	m, err := readManifest(dir, ManifestFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, perr := os.Stat(filepath.Join(dir, PartialManifestFile)); perr == nil {
				return nil, fmt.Errorf("open bundle %s: no %s but a %s: the writer did not finish; run 'predictio trace repair %s'", dir, ManifestFile, PartialManifestFile, dir)
			}
		}
		return nil, fmt.Errorf("open bundle: %w", err)
	}
	if err := checkVersion(m.FormatVersion); err != nil {
		return nil, fmt.Errorf("open bundle %s: %s: %w", dir, ManifestFile, err)
	}
	return &Bundle{dir: dir, man: *m}, nil
}

func readManifest(dir, name string) (*Manifest, error) {
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("read %s: larger than %d bytes: %w", path, maxManifestBytes, ErrCorrupt)
	}
	return parseManifest(b, path)
}

func parseManifest(b []byte, path string) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("read %s: field %s: %s is not a %s: %w", path, te.Field, te.Value, te.Type, ErrCorrupt)
		}
		return nil, fmt.Errorf("read %s: %v: %w", path, err, ErrCorrupt)
	}
	if m.FormatVersion == "" {
		return nil, fmt.Errorf("read %s: field format_version is missing: %w", path, ErrCorrupt)
	}
	return &m, nil
}

// majorOf returns the major number of a semantic version.
func majorOf(v string) (int, bool) {
	maj, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	n, err := strconv.Atoi(maj)
	return n, err == nil && n >= 0
}

func checkVersion(v string) error {
	want, _ := majorOf(FormatVersion)
	got, ok := majorOf(v)
	if !ok {
		return fmt.Errorf("field format_version %q is not a semantic version: %w", v, ErrCorrupt)
	}
	if got != want {
		return fmt.Errorf("bundle format version %s is not supported by this reader (format version %s reads %d.x); use a predictio release for format %d.x: %w", v, FormatVersion, want, got, ErrVersion)
	}
	return nil
}

// Dir returns the bundle directory.
func (b *Bundle) Dir() string { return b.dir }

// Manifest returns the bundle's manifest.
func (b *Bundle) Manifest() *Manifest { return &b.man }

// Close releases the bundle. Cursors and tables have their own Close.
func (b *Bundle) Close() error { return nil }

func (b *Bundle) openTable(name string) (*tableFile, error) {
	tf, err := openTableFile(filepath.Join(b.dir, name), name)
	if err != nil {
		return nil, err
	}
	if v, ok := tf.meta[MetaFormatVersion]; ok {
		if err := checkVersion(v); err != nil {
			tf.close()
			return nil, fmt.Errorf("read %s: schema metadata %s: %w", name, MetaFormatVersion, err)
		}
	}
	return tf, nil
}

var (
	filesCols    = []string{"file_id", "dev", "ino", "path", "size_bytes", "mtime_ns"}
	accessesCols = []string{"ts_ns", "pid", "tid", "comm", "file_id", "first_page", "npages", "kind"}
	hintsCols    = []string{"ts_ns", "pid", "kind", "file_id", "parent_page", "position", "children", "name", "offset_bytes", "length_bytes"}
)

func wantTypes(s *arrow.Schema, names []string) []colType {
	out := make([]colType, len(names))
	for i, n := range names {
		idx := s.FieldIndices(n)
		out[i] = wantType(s.Field(idx[0]).Type)
	}
	return out
}

var (
	filesTypes    = wantTypes(FilesSchema, filesCols)
	accessesTypes = wantTypes(AccessesSchema, accessesCols)
	hintsTypes    = wantTypes(HintsSchema, hintsCols)
)

// Files returns all rows of files.arrow.
func (b *Bundle) Files() ([]File, error) {
	tf, err := b.openTable(FilesFile)
	if err != nil {
		return nil, err
	}
	defer tf.close()
	return readFiles(tf)
}

func readFiles(tf *tableFile) (out []File, err error) {
	refs, err := tf.locate(filesCols, filesTypes)
	if err != nil {
		return nil, err
	}
	dec := newBatchDecoder()
	for bi := range tf.batches {
		if err := tf.loadBatch(dec, bi); err != nil {
			return nil, err
		}
		n := dec.rows
		id, err1 := fixed(dec, refs[0], 4)
		dev, err2 := fixed(dec, refs[1], 8)
		ino, err3 := fixed(dec, refs[2], 8)
		size, err4 := fixed(dec, refs[4], 8)
		mt, err5 := fixed(dec, refs[5], 8)
		if err := errors.Join(err1, err2, err3, err4, err5, checkNode(dec, refs[3].node, n)); err != nil {
			return nil, fmt.Errorf("read %s: batch %d: %w", tf.name, bi, err)
		}
		offs, data, err := decodeUtf8(dec, refs[3].buf, n)
		if err != nil {
			return nil, fmt.Errorf("read %s: batch %d: column path: %w", tf.name, bi, err)
		}
		ids, devs, inos, sizes, mts := asU32(id), asU64(dev), asU64(ino), asU64(size), asU64(mt)
		for i := 0; i < n; i++ {
			out = append(out, File{ID: ids[i], Dev: devs[i], Ino: inos[i], Path: string(data[offs[i]:offs[i+1]]), Size: sizes[i], MtimeNS: int64(mts[i])})
		}
	}
	return out, nil
}

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

func newAccessCursor(tf *tableFile) (*AccessCursor, error) {
	refs, err := tf.locate(accessesCols, accessesTypes)
	if err != nil {
		return nil, err
	}
	c := &AccessCursor{tf: tf, dec: newBatchDecoder(), refs: refs}
	c.dict = tf.dicts[refs[3].typ.dictID]
	c.commW = refs[3].typ.bitWidth / 8
	if c.commW != 1 && c.commW != 2 && c.commW != 4 && c.commW != 8 {
		return nil, tf.errf("column comm: index width %d bits", refs[3].typ.bitWidth)
	}
	return c, nil
}

// AccessCursor iterates over accesses.arrow rows. It allocates nothing per
// row: At returns the same Access, overwritten by each Next.
type AccessCursor struct {
	tf    *tableFile
	dec   *batchDecoder
	refs  []colRef
	batch int
	i, n  int

	ts, page            []uint64
	pid, tid, file, npg []uint32
	comm                []int32
	commBuf             []int32 // comm indices converted from other widths
	commW               int
	kind                []byte
	dict                []string

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
	ts, e1 := fixed(d, r[0], 8)
	pid, e2 := fixed(d, r[1], 4)
	tid, e3 := fixed(d, r[2], 4)
	comm, e4 := fixed(d, r[3], c.commW)
	file, e5 := fixed(d, r[4], 4)
	page, e6 := fixed(d, r[5], 8)
	npg, e7 := fixed(d, r[6], 4)
	kind, e8 := fixed(d, r[7], 1)
	if err := errors.Join(e1, e2, e3, e4, e5, e6, e7, e8); err != nil {
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
	c.ts, c.pid, c.tid, c.file, c.page, c.npg, c.kind = asU64(ts), asU32(pid), asU32(tid), asU32(file), asU64(page), asU32(npg), kind
	c.i, c.n = 0, n
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

// Hints returns a cursor over hints.arrow. A bundle without hints.arrow has
// no hints: the cursor is empty.
func (b *Bundle) Hints() (*HintCursor, error) {
	if _, err := os.Stat(filepath.Join(b.dir, HintsFile)); errors.Is(err, os.ErrNotExist) {
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

func newHintCursor(tf *tableFile) (*HintCursor, error) {
	refs, err := tf.locate(hintsCols, hintsTypes)
	if err != nil {
		return nil, err
	}
	return &HintCursor{tf: tf, dec: newBatchDecoder(), refs: refs, names: map[string]string{}}, nil
}

// HintCursor iterates over hints.arrow rows. At returns the same Hint,
// overwritten by each Next; its Children slice is reused.
type HintCursor struct {
	tf    *tableFile
	dec   *batchDecoder
	refs  []colRef
	batch int
	i, n  int

	hintCols // the current batch's columns, as the Writer buffers them
	names    map[string]string

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
	return true
}

func (c *HintCursor) load(bi int) error {
	d := c.dec
	if err := c.tf.loadBatch(d, bi); err != nil {
		return err
	}
	r := c.refs
	n := d.rows
	ts, e1 := fixed(d, r[0], 8)
	pid, e2 := fixed(d, r[1], 4)
	kind, e3 := fixed(d, r[2], 1)
	file, e4 := fixed(d, r[3], 4)
	parent, e5 := fixed(d, r[4], 8)
	pos, e6 := fixed(d, r[5], 4)
	off, e7 := fixed(d, r[8], 8)
	length, e8 := fixed(d, r[9], 8)
	if err := errors.Join(e1, e2, e3, e4, e5, e6, e7, e8, checkNode(d, r[6].node, n), checkNode(d, r[7].node, n)); err != nil {
		return fmt.Errorf("read %s: batch %d: %w", c.tf.name, bi, err)
	}
	// children: list offsets, then the child node and its values.
	minOff := int64(n+1) * 4
	if n == 0 {
		minOff = 0
	}
	cob, err := d.buffer(r[6].buf+1, minOff, int64(n+1)*4+64)
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
	if err := checkNodeLen(d, r[6].node+1, nchild); err != nil {
		return fmt.Errorf("read %s: batch %d: column children: %w", c.tf.name, bi, err)
	}
	cv, err := d.buffer(r[6].buf+3, int64(nchild)*8, int64(nchild)*8+64)
	if err != nil {
		return fmt.Errorf("read %s: batch %d: column children: %w", c.tf.name, bi, err)
	}
	if err := checkOffsets(childOff, nchild); err != nil {
		return fmt.Errorf("read %s: batch %d: column children: %w", c.tf.name, bi, err)
	}
	nameOff, nameData, err := decodeUtf8(d, r[7].buf, n)
	if err != nil {
		return fmt.Errorf("read %s: batch %d: column name: %w", c.tf.name, bi, err)
	}
	c.ts, c.pid, c.kind, c.file, c.parent, c.pos = asU64(ts), asU32(pid), kind, asU32(file), asU64(parent), asU32(pos)
	c.off, c.length = asU64(off), asU64(length)
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

// Table gives raw Arrow access to one table file through arrow-go, for
// export and merge. Each batch is checked by this package's decoder before
// arrow-go decodes it, so corrupt lengths become errors, not panics or huge
// allocations.
type Table struct {
	tf  *tableFile
	fr  *ipc.FileReader
	dec *batchDecoder
}

// OpenTable opens one table file (FilesFile, AccessesFile or HintsFile) for
// raw Arrow access. The table must be closed.
func (b *Bundle) OpenTable(name string) (*Table, error) {
	if schemaFor(name) == nil {
		return nil, fmt.Errorf("open table %q: not a bundle table (want %s, %s or %s)", name, FilesFile, AccessesFile, HintsFile)
	}
	mapped, err := b.openTable(name)
	if err != nil {
		return nil, err
	}
	// Records may outlive Close, so they must not point into a mapping.
	data := bytes.Clone(mapped.data)
	mapped.close()
	tf, err := newTableFileBytes(data, name)
	if err != nil {
		return nil, err
	}
	if err := tf.checkArrowSafe(); err != nil {
		return nil, err
	}
	fr, err := newArrowReader(bytes.NewReader(tf.data), int64(len(tf.data)), name)
	if err != nil {
		tf.close()
		return nil, err
	}
	return &Table{tf: tf, fr: fr, dec: newBatchDecoder()}, nil
}

// checkArrowSafe rejects schemas with column types this package cannot
// check, before arrow-go (which trusts lengths) reads them.
func (tf *tableFile) checkArrowSafe() error {
	for _, f := range tf.fields {
		if _, _, ok := f.typ.layout(); !ok {
			return tf.errf("column %s has type %s, which raw table access does not support", f.name, f.typ)
		}
	}
	return nil
}

// newArrowReader opens an arrow-go file reader with allocation and size
// limits, converting its panics on malformed input into errors.
func newArrowReader(r ipc.ReadAtSeeker, size int64, name string) (fr *ipc.FileReader, err error) {
	defer func() {
		if p := recover(); p != nil {
			fr, err = nil, fmt.Errorf("open table %s: malformed data (%v): %w", name, p, ErrCorrupt)
		}
	}()
	fr, err = ipc.NewFileReader(r, ipc.WithAllocator(&limitAllocator{max: maxBufferBytes}),
		ipc.WithBodySizeLimit(size), ipc.WithMetadataSizeLimit(size))
	if err != nil {
		return nil, fmt.Errorf("open table %s: %w", name, err)
	}
	return fr, nil
}

// Schema returns the table schema.
func (t *Table) Schema() *arrow.Schema { return t.fr.Schema() }

// NumBatches returns the number of record batches.
func (t *Table) NumBatches() int { return t.fr.NumRecords() }

// Batch returns record batch i; the caller must Release it.
func (t *Table) Batch(i int) (rec arrow.RecordBatch, err error) {
	defer func() {
		if r := recover(); r != nil {
			rec, err = nil, fmt.Errorf("read batch %d: malformed data (%v): %w", i, r, ErrCorrupt)
		}
	}()
	if i < 0 || i >= len(t.tf.batches) {
		return nil, fmt.Errorf("read batch %d: table %s has %d batches", i, t.tf.name, len(t.tf.batches))
	}
	m, err := readMessage(t.tf.data, int(t.tf.batches[i].off))
	if err == nil && m.hdrType != msgRecordBatch {
		err = fmt.Errorf("message type %d: %w", m.hdrType, ErrCorrupt)
	}
	if err == nil {
		err = checkBatch(t.dec, m)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: batch %d: %w", t.tf.name, i, err)
	}
	rec, err = t.fr.RecordBatch(i)
	if err != nil {
		return nil, fmt.Errorf("read batch %d: %w", i, err)
	}
	return rec, nil
}

// Close releases the table.
func (t *Table) Close() error {
	t.fr.Close()
	t.tf.close()
	return nil
}

// limitAllocator refuses single allocations above max, so corrupt length
// fields cannot make arrow-go allocate gigabytes. The refusal panics and
// Table.Batch recovers it as an error.
type limitAllocator struct {
	memory.GoAllocator
	max int
}

func (a *limitAllocator) Allocate(size int) []byte {
	if size < 0 || size > a.max {
		panic(fmt.Sprintf("allocation of %d bytes exceeds limit %d", size, a.max))
	}
	return a.GoAllocator.Allocate(size)
}

func (a *limitAllocator) Reallocate(size int, b []byte) []byte {
	if size < 0 || size > a.max {
		panic(fmt.Sprintf("allocation of %d bytes exceeds limit %d", size, a.max))
	}
	return a.GoAllocator.Reallocate(size, b)
}
