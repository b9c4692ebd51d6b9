package formats

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"slices"
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
	batchRows    int
	resolve      func(id uint32) File
	allowUnknown bool
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

// WithFileResolver sets the function the Writer calls for a file_id that
// buffered accesses or hints reference but AddFile has not added, when the
// batch holding them is about to be written. fn returns the file's row as
// far as it is known then (its Path may still be empty); the Writer adds it
// with that id. A recorder that learns paths late passes its file table's
// lookup here and need not call AddFile at all; an AddFile of an id the
// resolver already gave fails as a duplicate (check HasFile first).
func WithFileResolver(fn func(id uint32) File) WriterOption {
	return func(c *writerConfig) { c.resolve = fn }
}

// AllowUnknownFiles lets batches reference file ids that were never added,
// as a damaged bundle does. For tests and for tools that must copy such a
// bundle as it is; Verify and Bundle.CheckReferences report the result.
func AllowUnknownFiles() WriterOption {
	return func(c *writerConfig) { c.allowUnknown = true }
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
	prefix, err := filePrefix(t.schema)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	t.f = f
	t.write(prefix)
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

// writeBatch writes the record batch held by the encoder.
func (t *tableWriter) writeBatch(rows int) error {
	t.batches = append(t.batches, t.writeMessage())
	t.rows += uint64(rows)
	if testHookBatch != nil {
		testHookBatch(t.name, len(t.batches))
	}
	return t.err
}

// testHookBatch, when set (by tests), is called after each record batch
// is written, and testHookClose at each stage of Close.
var (
	testHookBatch func(table string, batches int)
	testHookClose func(stage string)
)

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
	tail, err := footerTail(footer)
	if err != nil {
		return fmt.Errorf("finish %s: %w", t.name, err)
	}
	t.write(tail)
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

// accessCols holds the access rows of the batch being built: n rows in
// columns allocated once at the batch size.
type accessCols struct {
	n                                     int
	ts, page, end, op, mapFirst, mapPages []uint64
	ret                                   []int64
	pid, tid, file, npg, tracer, calls    []uint32
	comm                                  []int32
	kind, prot                            []uint8
}

func newAccessCols(n int) accessCols {
	return accessCols{
		ts: make([]uint64, n), page: make([]uint64, n), end: make([]uint64, n), op: make([]uint64, n),
		mapFirst: make([]uint64, n), mapPages: make([]uint64, n), ret: make([]int64, n),
		pid: make([]uint32, n), tid: make([]uint32, n), file: make([]uint32, n), npg: make([]uint32, n), tracer: make([]uint32, n),
		calls: make([]uint32, n),
		comm:  make([]int32, n), kind: make([]uint8, n), prot: make([]uint8, n),
	}
}

type fileCols struct {
	id             []uint32
	dev, ino, size []uint64
	mtime          []int64
	mode           []uint32
	pathOff        []int32
	pathData       []byte
}

type hintCols struct {
	ts, parent, off, length []uint64
	pid, file, pos, tid     []uint32
	source                  []int32
	kind                    []uint8
	childOff                []int32
	children                []uint64
	nameOff                 []int32
	nameData                []byte
}

// dictState is a string dictionary written to a table: global indices in
// order of first appearance, emitted as an initial dictionary message and
// deltas so that the stream stays readable without its footer.
type dictState struct {
	id      int64
	idx     map[string]int32
	vals    []string
	emitted int
	last    string
	lastIdx int32
}

func newDict(id int64) *dictState { return &dictState{id: id, idx: map[string]int32{}, lastIdx: -1} }

// fixedDict is a dictionary of known values (the kind names).
func fixedDict(id int64, vals []string) *dictState {
	return &dictState{id: id, vals: vals, lastIdx: -1}
}

func (d *dictState) intern(s string) int32 {
	if s == d.last && d.lastIdx >= 0 {
		return d.lastIdx
	}
	i, ok := d.idx[s]
	if !ok {
		s = strings.Clone(s)
		i = int32(len(d.vals))
		d.vals = append(d.vals, s)
		d.idx[s] = i
	}
	d.last, d.lastIdx = d.vals[i], i
	return i
}

// pending reports whether entries were added since the last emit.
func (d *dictState) pending() bool { return len(d.vals) > d.emitted }

// emit writes to t the entries added since the last emit (all of them the
// first time) as a dictionary message, or with final all entries as a
// non-delta message, the one the footer references.
func (d *dictState) emit(t *tableWriter, final bool) block {
	from := d.emitted
	if final {
		from = 0
	}
	e := t.enc
	e.reset()
	offs := make([]int32, 1, len(d.vals)-from+1)
	var data []byte
	for _, s := range d.vals[from:] {
		data = append(data, s...)
		offs = append(offs, int32(len(data)))
	}
	strCol(e, offs, data)
	e.finish(len(offs)-1, d.id, !final && from > 0)
	if !final {
		d.emitted = len(d.vals)
	}
	return t.writeMessage()
}

// idSet is a set of file ids: a bitset for small ids, a map for the rest.
type idSet struct {
	dense  []uint64
	sparse map[uint32]struct{}
}

const denseIDs = 1 << 24

func (s *idSet) add(id uint32) {
	if id < denseIDs {
		if w := int(id / 64); w >= len(s.dense) {
			s.dense = append(s.dense, make([]uint64, max(w+1, 2*len(s.dense))-len(s.dense))...)
		}
		s.dense[id/64] |= 1 << (id % 64)
		return
	}
	if s.sparse == nil {
		s.sparse = map[uint32]struct{}{}
	}
	s.sparse[id] = struct{}{}
}

func (s *idSet) has(id uint32) bool {
	if id < denseIDs {
		w := int(id / 64)
		return w < len(s.dense) && s.dense[w]&(1<<(id%64)) != 0
	}
	_, ok := s.sparse[id]
	return ok
}

// refTracker records which file ids the rows buffered for one table
// reference that have no file row yet.
type refTracker struct {
	missing map[uint32]struct{}
	last    uint32
	lastSet bool
}

// note records a reference to id (known reports whether it has a row).
func (r *refTracker) note(id uint32, known func(uint32) bool) {
	r.last, r.lastSet = id, true
	if !known(id) {
		if r.missing == nil {
			r.missing = map[uint32]struct{}{}
		}
		r.missing[id] = struct{}{}
	}
}

// Writer streams rows into a new bundle directory. It is not safe for
// concurrent use.
//
// File rows and the rows that reference them (docs/format.md, Crash
// recovery): a file's row reaches disk no later than the first accesses or
// hints batch that references its file_id. The Writer enforces it. Before it
// writes an accesses or hints batch (when the batch is full, and at Flush
// and Close) it writes every file row added so far; for a file_id the batch
// references that AddFile has not added, it asks the WithFileResolver
// function for the row. Without a resolver that is an error wrapping
// ErrMissingFiles, and the Writer must be aborted. So a caller either adds a
// file's row before the rows that reference it, or, if it learns paths late
// (a recorder), gives a resolver and adds rows when it knows them: until the
// batch is written, the row may still come through AddFile.
type Writer struct {
	dir   string
	cfg   writerConfig
	man   Manifest
	enc   *batchEncoder
	files *tableWriter
	acc   *tableWriter
	hints *tableWriter
	fc    fileCols
	ac    accessCols
	hc    hintCols

	fileIDs   idSet
	accRefs   refTracker
	hintRefs  refTracker
	kindIdx   []uint8 // kind_name indices of the current batch
	comm      *dictState
	accKinds  *dictState
	source    *dictState
	hintKinds *dictState

	span WallSpan // of the accesses written

	err    error // a broken file-reference contract: the writer is unusable
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
	ad, hd := dictIDs(AccessesSchema), dictIDs(HintsSchema)
	w := &Writer{dir: dir, cfg: cfg, enc: newBatchEncoder(),
		comm: newDict(ad["comm"]), accKinds: fixedDict(ad["kind_name"], accessKindDict),
		source: newDict(hd["source"]), hintKinds: fixedDict(hd["kind_name"], hintKindDict)}
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
	w.ac = newAccessCols(cfg.batchRows)
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
// sets it to HostInfo()), Recording, Start, End, Counters and
// Timing.ServiceTimes before Close; the Writer sets the format version,
// tables, the other Timing fields and Recording.Kernel (when empty).
func (w *Writer) Manifest() *Manifest { return &w.man }

func (w *Writer) usable() error {
	if w.closed {
		return errClosed
	}
	return w.err
}

// AddFile adds a row to files.arrow. File ids must be unique. The row is
// written before the next accesses or hints batch.
func (w *Writer) AddFile(f File) error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.fileIDs.has(f.ID) {
		return fmt.Errorf("add file %d (%s): duplicate file_id", f.ID, f.Path)
	}
	w.addFile(f)
	if len(w.fc.id) >= w.cfg.batchRows || len(w.fc.pathData) > 64<<20 {
		return w.flushFiles()
	}
	return nil
}

// HasFile reports whether a row for file id was added.
func (w *Writer) HasFile(id uint32) bool { return w.fileIDs.has(id) }

func (w *Writer) addFile(f File) {
	w.fileIDs.add(f.ID)
	delete(w.accRefs.missing, f.ID)
	delete(w.hintRefs.missing, f.ID)
	c := &w.fc
	c.id = append(c.id, f.ID)
	c.dev = append(c.dev, f.Dev)
	c.ino = append(c.ino, f.Ino)
	c.size = append(c.size, f.Size)
	c.mtime = append(c.mtime, f.MtimeNS)
	c.mode = append(c.mode, f.Mode)
	c.pathData = append(c.pathData, f.Path...)
	c.pathOff = append(c.pathOff, int32(len(c.pathData)))
}

// Append adds a row to accesses.arrow. It allocates nothing in steady state
// (a new comm value is copied once, a new file_id noted once).
func (w *Writer) Append(a *Access) error {
	if err := w.usable(); err != nil {
		return err
	}
	c := &w.ac
	if a.FileID != w.accRefs.last || !w.accRefs.lastSet {
		w.accRefs.note(a.FileID, w.fileIDs.has)
	}
	i := c.n
	_ = c.prot[i] // the columns have one length: one bounds check
	c.ts[i] = a.TS
	c.pid[i] = a.PID
	c.tid[i] = a.TID
	c.comm[i] = w.comm.intern(a.Comm)
	c.file[i] = a.FileID
	c.page[i] = a.FirstPage
	c.npg[i] = a.NPages
	c.kind[i] = uint8(a.Kind)
	c.end[i] = a.EndNS
	c.op[i] = a.Op
	c.ret[i] = a.Ret
	c.prot[i] = a.Prot
	c.mapFirst[i] = a.MapFirstPage
	c.mapPages[i] = a.MapPages
	c.tracer[i] = a.TracerNS
	c.calls[i] = a.TracerCalls
	if c.n = i + 1; c.n >= w.cfg.batchRows {
		return w.flushAccesses()
	}
	return nil
}

// AppendHint adds a row to hints.arrow. A FileID of 0 references no file.
func (w *Writer) AppendHint(h *Hint) error {
	if err := w.usable(); err != nil {
		return err
	}
	c := &w.hc
	if h.FileID != 0 && (h.FileID != w.hintRefs.last || !w.hintRefs.lastSet) {
		w.hintRefs.note(h.FileID, w.fileIDs.has)
	}
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
	c.tid = append(c.tid, h.TID)
	c.source = append(c.source, w.source.intern(h.Source))
	if len(c.ts) >= w.cfg.batchRows || len(c.children) > 8<<20 || len(c.nameData) > 64<<20 {
		return w.flushHints()
	}
	return nil
}

// resolve makes sure every file id in r.missing has a row, through the
// resolver, before the batch tracked by r is written.
func (w *Writer) resolve(r *refTracker, table string, rows int) error {
	r.lastSet = false // the next batch notes its ids afresh
	if len(r.missing) == 0 {
		return nil
	}
	ids := make([]uint32, 0, len(r.missing))
	for id := range r.missing {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	switch {
	case w.cfg.resolve != nil:
		for _, id := range ids {
			f := w.cfg.resolve(id)
			f.ID = id
			w.addFile(f)
		}
	case w.cfg.allowUnknown:
		clear(r.missing)
	default:
		w.err = fmt.Errorf("write %s: %d buffered rows reference %d file_id(s) with no file row (%s): call AddFile before appending them, or give the writer WithFileResolver: %w",
			table, rows, len(ids), idList(ids, 5), ErrMissingFiles)
		return w.err
	}
	return nil
}

// idList prints the first n ids.
func idList(ids []uint32, n int) string {
	var sb strings.Builder
	for i, id := range ids {
		if i == n {
			fmt.Fprintf(&sb, ", ... %d more", len(ids)-n)
			break
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprint(&sb, id)
	}
	return sb.String()
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

// kindNameCol writes the kind_name indices of kinds (a kind's value for a
// defined kind, 0 otherwise) into scratch. When they equal kinds, as they do
// unless a kind is undefined, the compressed buffer at kindBuf is repeated.
func kindNameCol(e *batchEncoder, kinds []uint8, valid func(uint8) bool, kindBuf int, scratch *[]uint8) {
	idx := (*scratch)[:0]
	same := true
	for _, k := range kinds {
		if !valid(k) {
			k, same = 0, false
		}
		idx = append(idx, k)
	}
	*scratch = idx
	e.node(len(kinds))
	e.buffer(nil)
	if same {
		e.repeat(kindBuf)
	} else {
		e.buffer(idx)
	}
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
	fixedCol(e, c.mode)
	e.finish(len(c.id), -1, false)
	n := len(c.id)
	c.id, c.dev, c.ino, c.size, c.mtime, c.mode = c.id[:0], c.dev[:0], c.ino[:0], c.size[:0], c.mtime[:0], c.mode[:0]
	c.pathOff, c.pathData = c.pathOff[:1], c.pathData[:0]
	return w.files.writeBatch(n)
}

func (w *Writer) flushAccesses() error {
	c := &w.ac
	t := w.acc
	n := c.n
	if n == 0 && len(t.batches) > 0 {
		return nil
	}
	if err := w.resolve(&w.accRefs, AccessesFile, n); err != nil {
		return err
	}
	if err := w.flushFiles(); err != nil {
		return err
	}
	if len(t.batches) == 0 {
		w.accKinds.emit(t, false)
	}
	if len(t.batches) == 0 || w.comm.pending() {
		w.comm.emit(t, false)
	}
	w.noteTiming()
	e := w.enc
	e.reset()
	fixedCol(e, c.ts[:n])
	fixedCol(e, c.pid[:n])
	fixedCol(e, c.tid[:n])
	fixedCol(e, c.comm[:n])
	fixedCol(e, c.file[:n])
	fixedCol(e, c.page[:n])
	fixedCol(e, c.npg[:n])
	fixedCol(e, c.kind[:n]) // buffers 14, 15
	fixedCol(e, c.end[:n])
	fixedCol(e, c.op[:n])
	fixedCol(e, c.ret[:n])
	fixedCol(e, c.prot[:n])
	fixedCol(e, c.mapFirst[:n])
	fixedCol(e, c.mapPages[:n])
	kindNameCol(e, c.kind[:n], func(k uint8) bool { return AccessKind(k).Valid() }, 15, &w.kindIdx)
	fixedCol(e, c.tracer[:n])
	fixedCol(e, c.calls[:n])
	e.finish(n, -1, false)
	c.n = 0
	return t.writeBatch(n)
}

// noteTiming extends the recorded wall by the buffered access rows.
func (w *Writer) noteTiming() {
	c := &w.ac
	for i, ts := range c.ts[:c.n] {
		w.span.Add(AccessKind(c.kind[i]), ts, c.end[i])
	}
}

func (w *Writer) flushHints() error {
	c := &w.hc
	t := w.hints
	if len(c.ts) == 0 && len(t.batches) > 0 {
		return nil
	}
	if err := w.resolve(&w.hintRefs, HintsFile, len(c.ts)); err != nil {
		return err
	}
	if err := w.flushFiles(); err != nil {
		return err
	}
	if len(t.batches) == 0 {
		w.hintKinds.emit(t, false)
	}
	if len(t.batches) == 0 || w.source.pending() {
		w.source.emit(t, false)
	}
	e := w.enc
	e.reset()
	fixedCol(e, c.ts)
	fixedCol(e, c.pid)
	fixedCol(e, c.kind) // buffers 4, 5
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
	fixedCol(e, c.tid)
	fixedCol(e, c.source)
	kindNameCol(e, c.kind, func(k uint8) bool { return HintKind(k).Valid() }, 5, &w.kindIdx)
	e.finish(len(c.ts), -1, false)
	n := len(c.ts)
	c.ts, c.pid, c.kind, c.file, c.parent, c.pos = c.ts[:0], c.pid[:0], c.kind[:0], c.file[:0], c.parent[:0], c.pos[:0]
	c.childOff, c.children, c.nameOff, c.nameData, c.off, c.length = c.childOff[:1], c.children[:0], c.nameOff[:1], c.nameData[:0], c.off[:0], c.length[:0]
	c.tid, c.source = c.tid[:0], c.source[:0]
	return t.writeBatch(n)
}

// flushAll writes every buffered row: files first, then the accesses and
// hints that may reference them.
func (w *Writer) flushAll() error {
	if err := w.flushFiles(); err != nil {
		return err
	}
	if w.ac.n > 0 {
		if err := w.flushAccesses(); err != nil {
			return err
		}
	}
	if len(w.hc.ts) > 0 {
		return w.flushHints()
	}
	return nil
}

// Flush writes partial batches and the provisional manifest, and syncs them
// to disk, so that Repair recovers every row appended so far even after a
// power cut. Call it periodically; each call may write a batch smaller than
// the batch size. files.arrow is synced before the tables that reference it.
func (w *Writer) Flush() error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := w.flushAll(); err != nil {
		return fmt.Errorf("flush bundle: %w", err)
	}
	for _, t := range []*tableWriter{w.files, w.acc, w.hints} {
		if err := t.f.Sync(); err != nil {
			return fmt.Errorf("flush bundle: sync %s: %w", t.name, err)
		}
	}
	w.setTiming()
	return w.writePartialManifest()
}

// Close writes the remaining rows and each table's footer, then
// manifest.json with counts and checksums, atomically (temporary name,
// fsync, rename), and syncs the directory.
func (w *Writer) Close() error {
	if err := w.usable(); err != nil {
		return err
	}
	w.closed = true
	defer w.closeFiles()
	if err := w.flushAll(); err != nil {
		return fmt.Errorf("close bundle: %w", err)
	}
	// Every table gets at least one (possibly empty) batch.
	for _, t := range []*tableWriter{w.files, w.acc, w.hints} {
		if len(t.batches) > 0 {
			continue
		}
		var err error
		switch t {
		case w.acc:
			err = w.flushAccesses()
		case w.hints:
			err = w.flushHints()
		default:
			writeEmptyBatch(t)
			err = t.err
		}
		if err != nil {
			return fmt.Errorf("close bundle: %w", err)
		}
	}
	hook := func(stage string) {
		if testHookClose != nil {
			testHookClose(stage)
		}
	}
	hook("tables")
	if err := w.files.finish(nil); err != nil {
		return fmt.Errorf("close bundle: %w", err)
	}
	hook("files finished")
	if err := w.acc.finish(func() []block { return []block{w.comm.emit(w.acc, true), w.accKinds.emit(w.acc, true)} }); err != nil {
		return fmt.Errorf("close bundle: %w", err)
	}
	hook("accesses finished")
	if err := w.hints.finish(func() []block { return []block{w.source.emit(w.hints, true), w.hintKinds.emit(w.hints, true)} }); err != nil {
		return fmt.Errorf("close bundle: %w", err)
	}
	hook("hints finished")
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
	if m.Recording.Kernel == "" {
		m.Recording.Kernel = m.Host.KernelRelease
	}
	w.setTiming()
	if err := writeJSONAtomic(w.dir, ManifestFile, m); err != nil {
		return fmt.Errorf("close bundle: %w", err)
	}
	hook("manifest written")
	os.Remove(filepath.Join(w.dir, PartialManifestFile))
	return syncDir(w.dir)
}

// setTiming fills the manifest's timing from the accesses written.
func (w *Writer) setTiming() {
	w.span.SetTiming(&w.man.Timing)
}

// writeEmptyBatch writes a zero-row record batch of tw's schema.
func writeEmptyBatch(tw *tableWriter) {
	e := tw.enc
	e.reset()
	for _, f := range tw.schema.Fields() {
		emptyColumn(e, f.Type)
	}
	e.finish(0, -1, false)
	tw.batches = append(tw.batches, tw.writeMessage())
}

// emptyColumn encodes a column of no rows.
func emptyColumn(e *batchEncoder, t arrow.DataType) {
	switch t := t.(type) {
	case *arrow.StringType:
		strCol(e, []int32{0}, nil)
	case *arrow.ListType:
		e.node(0)
		e.buffer(nil)
		e.buffer(bytesOf([]int32{0}))
		emptyColumn(e, t.Elem())
	default: // fixed width and dictionary indices
		e.node(0)
		e.buffer(nil)
		e.buffer(nil)
	}
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
