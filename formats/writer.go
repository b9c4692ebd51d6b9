package formats

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
)

// PartialManifestFile is the provisional manifest a Writer keeps while it
// runs. Repair turns it into manifest.json.
const PartialManifestFile = "manifest.partial.json"

// DefaultBatchRows is the default number of rows per record batch.
const DefaultBatchRows = 65536

// WriterOption configures a Writer.
type WriterOption func(*writerConfig)

type writerConfig struct {
	batchRows int
}

// WithBatchRows sets the number of rows per record batch (default 65536).
// Batches are smaller only at the end of a table and where Flush was called.
func WithBatchRows(n int) WriterOption {
	return func(c *writerConfig) {
		if n > 0 {
			c.batchRows = min(n, maxBatchRows)
		}
	}
}

var errClosed = errors.New("bundle writer is closed")

// tableWriter appends framed IPC messages to one table file.
type tableWriter struct {
	name    string
	schema  *arrow.Schema
	f       *os.File
	h       hash.Hash
	pos     int64
	batches []block
	rows    uint64
	enc     *batchEncoder
	err     error
}

func newTableWriter(dir, name string, enc *batchEncoder) (*tableWriter, error) {
	t := &tableWriter{name: name, schema: schemaFor(name), h: sha256.New(), enc: enc}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	t.f = f
	sm, err := schemaMessage(t.schema)
	if err != nil {
		f.Close()
		return nil, err
	}
	t.write(arrowMagic)
	t.write(sm)
	return t, t.err
}

func (t *tableWriter) write(b []byte) {
	if t.err != nil {
		return
	}
	if _, err := t.f.Write(b); err != nil {
		t.err = fmt.Errorf("write %s: %w", t.name, err)
		return
	}
	t.h.Write(b)
	t.pos += int64(len(b))
}

// writeMessage writes the message held by the encoder and returns its block.
func (t *tableWriter) writeMessage() block {
	b := block{off: t.pos, metaLen: int32(len(t.enc.msg)), bodyLen: int64(len(t.enc.body))}
	t.write(t.enc.msg)
	t.write(t.enc.body)
	return b
}

// finish writes the full dictionaries (if any), end of stream and footer.
func (t *tableWriter) finish(dicts func() []block) error {
	var db []block
	if dicts != nil {
		db = dicts()
	}
	t.write([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	if t.err != nil {
		return t.err
	}
	footer, err := buildFooter(t.schema, db, t.batches)
	if err != nil {
		return fmt.Errorf("finish %s: %w", t.name, err)
	}
	t.write(footer)
	t.write(binary.LittleEndian.AppendUint32(nil, uint32(len(footer))))
	t.write([]byte("ARROW1"))
	if t.err != nil {
		return t.err
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", t.name, err)
	}
	return nil
}

func (t *tableWriter) info() TableInfo {
	return TableInfo{SHA256: hex.EncodeToString(t.h.Sum(nil)), Rows: t.rows, Bytes: uint64(t.pos)}
}

// column scratch for the three tables

type accessCols struct {
	ts, page            []uint64
	pid, tid, file, npg []uint32
	comm                []int32
	kind                []uint8
}

type fileCols struct {
	id             []uint32
	dev, ino, size []uint64
	mtime          []int64
	pathOff        []int32
	pathData       []byte
}

type hintCols struct {
	ts, parent, off, length []uint64
	pid, file, pos          []uint32
	kind                    []uint8
	childOff                []int32
	children                []uint64
	nameOff                 []int32
	nameData                []byte
}

// Writer streams rows into a new bundle directory. It is not safe for
// concurrent use.
type Writer struct {
	dir     string
	cfg     writerConfig
	man     Manifest
	enc     *batchEncoder
	files   *tableWriter
	acc     *tableWriter
	hints   *tableWriter
	fc      fileCols
	ac      accessCols
	hc      hintCols
	fileIDs map[uint32]struct{}

	// comm dictionary: global indices in order of first appearance.
	commIdx     map[string]int32
	commVals    []string
	commEmitted int // entries already written as dictionary messages
	lastComm    string
	lastIdx     int32

	closed bool
}

// Create starts a bundle in dir, which must not exist or must be empty. It
// writes a provisional manifest (manifest.partial.json) so that Repair can
// restore a bundle whose writer was killed.
func Create(dir string, opts ...WriterOption) (*Writer, error) {
	cfg := writerConfig{batchRows: DefaultBatchRows}
	for _, o := range opts {
		o(&cfg)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if len(ents) > 0 {
		return nil, fmt.Errorf("create bundle: %s is not empty; choose a new directory", dir)
	}
	w := &Writer{dir: dir, cfg: cfg, enc: newBatchEncoder(), fileIDs: map[uint32]struct{}{}, commIdx: map[string]int32{}, lastIdx: -1}
	w.man.FormatVersion = FormatVersion
	w.man.Host = HostInfo()
	for _, p := range []struct {
		t    **tableWriter
		name string
	}{{&w.files, FilesFile}, {&w.acc, AccessesFile}, {&w.hints, HintsFile}} {
		if *p.t, err = newTableWriter(dir, p.name, w.enc); err != nil {
			w.closeFiles()
			return nil, fmt.Errorf("create bundle: %w", err)
		}
	}
	n := cfg.batchRows
	w.ac = accessCols{
		ts: make([]uint64, 0, n), page: make([]uint64, 0, n),
		pid: make([]uint32, 0, n), tid: make([]uint32, 0, n), file: make([]uint32, 0, n), npg: make([]uint32, 0, n),
		comm: make([]int32, 0, n), kind: make([]uint8, 0, n),
	}
	w.fc.pathOff = []int32{0}
	w.hc.childOff = []int32{0}
	w.hc.nameOff = []int32{0}
	if err := w.writePartialManifest(); err != nil {
		w.closeFiles()
		return nil, err
	}
	return w, nil
}

// Manifest returns the manifest Close will write. Callers fill Host (Create
// sets it to HostInfo()), Recording, Start, End and Counters before Close.
func (w *Writer) Manifest() *Manifest { return &w.man }

// AddFile adds a row to files.arrow. File ids must be unique.
func (w *Writer) AddFile(f File) error {
	if w.closed {
		return errClosed
	}
	if _, dup := w.fileIDs[f.ID]; dup {
		return fmt.Errorf("add file %d (%s): duplicate file_id", f.ID, f.Path)
	}
	w.fileIDs[f.ID] = struct{}{}
	c := &w.fc
	c.id = append(c.id, f.ID)
	c.dev = append(c.dev, f.Dev)
	c.ino = append(c.ino, f.Ino)
	c.size = append(c.size, f.Size)
	c.mtime = append(c.mtime, f.MtimeNS)
	c.pathData = append(c.pathData, f.Path...)
	c.pathOff = append(c.pathOff, int32(len(c.pathData)))
	if len(c.id) >= w.cfg.batchRows || len(c.pathData) > 64<<20 {
		return w.flushFiles()
	}
	return nil
}

// Append adds a row to accesses.arrow. It allocates nothing in steady state
// (a new comm value is copied once).
func (w *Writer) Append(a *Access) error {
	if w.closed {
		return errClosed
	}
	c := &w.ac
	var ci int32
	if a.Comm == w.lastComm && w.lastIdx >= 0 {
		ci = w.lastIdx
	} else {
		ci = w.intern(a.Comm)
	}
	c.ts = append(c.ts, a.TS)
	c.pid = append(c.pid, a.PID)
	c.tid = append(c.tid, a.TID)
	c.comm = append(c.comm, ci)
	c.file = append(c.file, a.FileID)
	c.page = append(c.page, a.FirstPage)
	c.npg = append(c.npg, a.NPages)
	c.kind = append(c.kind, uint8(a.Kind))
	if len(c.ts) >= w.cfg.batchRows {
		return w.flushAccesses()
	}
	return nil
}

func (w *Writer) intern(s string) int32 {
	i, ok := w.commIdx[s]
	if !ok {
		s = strings.Clone(s)
		i = int32(len(w.commVals))
		w.commVals = append(w.commVals, s)
		w.commIdx[s] = i
	}
	w.lastComm, w.lastIdx = w.commVals[i], i
	return i
}

// AppendHint adds a row to hints.arrow.
func (w *Writer) AppendHint(h *Hint) error {
	if w.closed {
		return errClosed
	}
	c := &w.hc
	c.ts = append(c.ts, h.TS)
	c.pid = append(c.pid, h.PID)
	c.kind = append(c.kind, uint8(h.Kind))
	c.file = append(c.file, h.FileID)
	c.parent = append(c.parent, h.ParentPage)
	c.pos = append(c.pos, h.Position)
	c.children = append(c.children, h.Children...)
	c.childOff = append(c.childOff, int32(len(c.children)))
	c.nameData = append(c.nameData, h.Name...)
	c.nameOff = append(c.nameOff, int32(len(c.nameData)))
	c.off = append(c.off, h.OffsetBytes)
	c.length = append(c.length, h.LengthBytes)
	if len(c.ts) >= w.cfg.batchRows || len(c.children) > 8<<20 || len(c.nameData) > 64<<20 {
		return w.flushHints()
	}
	return nil
}

func bytesOf[T uint8 | int32 | uint32 | uint64 | int64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

func fixedCol[T uint8 | int32 | uint32 | uint64 | int64](e *batchEncoder, s []T) {
	e.node(len(s))
	e.buffer(nil)
	e.buffer(bytesOf(s))
}

func strCol(e *batchEncoder, offs []int32, data []byte) {
	e.node(len(offs) - 1)
	e.buffer(nil)
	e.buffer(bytesOf(offs))
	e.buffer(data)
}

func (w *Writer) flushFiles() error {
	c := &w.fc
	if len(c.id) == 0 {
		return nil
	}
	e := w.enc
	e.reset()
	fixedCol(e, c.id)
	fixedCol(e, c.dev)
	fixedCol(e, c.ino)
	strCol(e, c.pathOff, c.pathData)
	fixedCol(e, c.size)
	fixedCol(e, c.mtime)
	e.finish(len(c.id), -1, false)
	t := w.files
	t.batches = append(t.batches, t.writeMessage())
	t.rows += uint64(len(c.id))
	c.id, c.dev, c.ino, c.size, c.mtime = c.id[:0], c.dev[:0], c.ino[:0], c.size[:0], c.mtime[:0]
	c.pathOff, c.pathData = c.pathOff[:1], c.pathData[:0]
	return t.err
}

// emitComm writes comm dictionary entries added since the last batch, as
// the initial dictionary or a delta, so that the table's stream stays
// readable without its footer.
func (w *Writer) emitComm(final bool) block {
	from := w.commEmitted
	if final {
		from = 0
	}
	e := w.enc
	e.reset()
	offs := make([]int32, 1, len(w.commVals)-from+1)
	var data []byte
	for _, s := range w.commVals[from:] {
		data = append(data, s...)
		offs = append(offs, int32(len(data)))
	}
	strCol(e, offs, data)
	e.finish(len(offs)-1, 0, !final && from > 0)
	if !final {
		w.commEmitted = len(w.commVals)
	}
	return w.acc.writeMessage()
}

func (w *Writer) flushAccesses() error {
	c := &w.ac
	t := w.acc
	if len(c.ts) == 0 && len(t.batches) > 0 {
		return nil
	}
	if len(t.batches) == 0 || len(w.commVals) > w.commEmitted {
		w.emitComm(false)
	}
	e := w.enc
	e.reset()
	fixedCol(e, c.ts)
	fixedCol(e, c.pid)
	fixedCol(e, c.tid)
	fixedCol(e, c.comm)
	fixedCol(e, c.file)
	fixedCol(e, c.page)
	fixedCol(e, c.npg)
	fixedCol(e, c.kind)
	e.finish(len(c.ts), -1, false)
	t.batches = append(t.batches, t.writeMessage())
	t.rows += uint64(len(c.ts))
	c.ts, c.pid, c.tid, c.comm, c.file, c.page, c.npg, c.kind = c.ts[:0], c.pid[:0], c.tid[:0], c.comm[:0], c.file[:0], c.page[:0], c.npg[:0], c.kind[:0]
	return t.err
}

func (w *Writer) flushHints() error {
	c := &w.hc
	if len(c.ts) == 0 {
		return nil
	}
	e := w.enc
	e.reset()
	fixedCol(e, c.ts)
	fixedCol(e, c.pid)
	fixedCol(e, c.kind)
	fixedCol(e, c.file)
	fixedCol(e, c.parent)
	fixedCol(e, c.pos)
	e.node(len(c.ts))
	e.buffer(nil)
	e.buffer(bytesOf(c.childOff))
	fixedCol(e, c.children)
	strCol(e, c.nameOff, c.nameData)
	fixedCol(e, c.off)
	fixedCol(e, c.length)
	e.finish(len(c.ts), -1, false)
	t := w.hints
	t.batches = append(t.batches, t.writeMessage())
	t.rows += uint64(len(c.ts))
	c.ts, c.pid, c.kind, c.file, c.parent, c.pos = c.ts[:0], c.pid[:0], c.kind[:0], c.file[:0], c.parent[:0], c.pos[:0]
	c.childOff, c.children, c.nameOff, c.nameData, c.off, c.length = c.childOff[:1], c.children[:0], c.nameOff[:1], c.nameData[:0], c.off[:0], c.length[:0]
	return t.err
}

func (w *Writer) flushAll() error {
	return errors.Join(w.flushFiles(), w.flushAccessesIfAny(), w.flushHints())
}

func (w *Writer) flushAccessesIfAny() error {
	if len(w.ac.ts) == 0 {
		return nil
	}
	return w.flushAccesses()
}

// Flush writes partial batches and the provisional manifest, and syncs them
// to disk, so that Repair recovers every row appended so far even after a
// power cut. Call it periodically; each call may write a batch smaller than
// the batch size.
func (w *Writer) Flush() error {
	if w.closed {
		return errClosed
	}
	if err := w.flushAll(); err != nil {
		return fmt.Errorf("flush bundle: %w", err)
	}
	for _, t := range []*tableWriter{w.files, w.acc, w.hints} {
		if err := t.f.Sync(); err != nil {
			return fmt.Errorf("flush bundle: sync %s: %w", t.name, err)
		}
	}
	return w.writePartialManifest()
}

// Close writes the remaining rows and each table's footer, then
// manifest.json with counts and checksums, atomically (temporary name,
// fsync, rename), and syncs the directory.
func (w *Writer) Close() error {
	if w.closed {
		return errClosed
	}
	w.closed = true
	defer w.closeFiles()
	if err := w.flushAll(); err != nil {
		return fmt.Errorf("close bundle: %w", err)
	}
	// Every table gets at least one (possibly empty) batch.
	if len(w.files.batches) == 0 {
		w.flushFilesForce()
	}
	if len(w.acc.batches) == 0 {
		if err := w.flushAccesses(); err != nil {
			return fmt.Errorf("close bundle: %w", err)
		}
	}
	if len(w.hints.batches) == 0 {
		w.flushHintsForce()
	}
	errs := []error{
		w.files.finish(nil),
		w.acc.finish(func() []block { return []block{w.emitComm(true)} }),
		w.hints.finish(nil),
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close bundle: %w", err)
	}
	m := &w.man
	m.FormatVersion = FormatVersion
	m.Tables = map[string]TableInfo{FilesFile: w.files.info(), AccessesFile: w.acc.info(), HintsFile: w.hints.info()}
	m.Complete = true
	if m.Counters.Files == 0 {
		m.Counters.Files = w.files.rows
	}
	if m.Counters.Events == 0 {
		m.Counters.Events = w.acc.rows
	}
	if m.Counters.Hints == 0 {
		m.Counters.Hints = w.hints.rows
	}
	if err := writeJSONAtomic(w.dir, ManifestFile, m); err != nil {
		return fmt.Errorf("close bundle: %w", err)
	}
	os.Remove(filepath.Join(w.dir, PartialManifestFile))
	return syncDir(w.dir)
}

func (w *Writer) flushFilesForce() {
	e := w.enc
	e.reset()
	c := &w.fc
	fixedCol(e, c.id)
	fixedCol(e, c.dev)
	fixedCol(e, c.ino)
	strCol(e, c.pathOff, c.pathData)
	fixedCol(e, c.size)
	fixedCol(e, c.mtime)
	e.finish(0, -1, false)
	w.files.batches = append(w.files.batches, w.files.writeMessage())
}

func (w *Writer) flushHintsForce() {
	e := w.enc
	e.reset()
	c := &w.hc
	fixedCol(e, c.ts)
	fixedCol(e, c.pid)
	fixedCol(e, c.kind)
	fixedCol(e, c.file)
	fixedCol(e, c.parent)
	fixedCol(e, c.pos)
	e.node(0)
	e.buffer(nil)
	e.buffer(bytesOf(c.childOff))
	fixedCol(e, c.children)
	strCol(e, c.nameOff, c.nameData)
	fixedCol(e, c.off)
	fixedCol(e, c.length)
	e.finish(0, -1, false)
	w.hints.batches = append(w.hints.batches, w.hints.writeMessage())
}

// Abort stops without finalizing. Rows not yet flushed are dropped; what
// earlier Flush calls (and full batches) wrote stays recoverable by Repair.
func (w *Writer) Abort() error {
	if w.closed {
		return errClosed
	}
	w.closed = true
	return w.closeFiles()
}

func (w *Writer) closeFiles() error {
	var errs []error
	for _, t := range []*tableWriter{w.files, w.acc, w.hints} {
		if t != nil && t.f != nil {
			errs = append(errs, t.f.Close())
			t.f = nil
		}
	}
	return errors.Join(errs...)
}

func (w *Writer) writePartialManifest() error {
	m := w.man
	m.Complete = false
	m.Tables = nil
	if err := writeJSONAtomic(w.dir, PartialManifestFile, &m); err != nil {
		return fmt.Errorf("write provisional manifest: %w", err)
	}
	// Make the table files' and the manifest's directory entries durable.
	return syncDir(w.dir)
}

// writeJSONAtomic writes v as indented JSON to dir/name through a temporary
// file, fsync and rename.
func writeJSONAtomic(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	b = append(b, '\n')
	tmp := filepath.Join(dir, "."+name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("rename %s: %w", name, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
