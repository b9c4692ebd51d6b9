package formats

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// block locates one message in a table file (format/File.fbs Block).
type block struct {
	off     int64
	metaLen int32
	bodyLen int64
}

func (b block) end() int64 { return b.off + int64(b.metaLen) + b.bodyLen }

// integrity is how a table file's contents are checked while it is read.
type integrity int

const (
	// checkNone: only the structural checks every reader makes (lengths
	// and offsets within bounds), NoVerify.
	checkNone integrity = iota
	// checkCRC: format 1.1 files. The schema message, the footer and every
	// dictionary message are checked when the file is opened, each record
	// batch when it is loaded, all with CRC32C (docs/format.md, Integrity).
	checkCRC
	// checkLegacy: files without CRCs (format 1.0, foreign writers). zstd
	// frame checksums are checked for every buffer, and the file's SHA-256
	// against the manifest when the batches are read in order.
	checkLegacy
)

// tableOpts says how to check a table file.
type tableOpts struct {
	verify bool
	// requireCRC rejects a file without CRCs (the manifest says 1.1).
	requireCRC bool
	// sha256 is the manifest's checksum of the file, for checkLegacy.
	sha256 string
}

// tableFile is one Arrow IPC file mapped into memory.
type tableFile struct {
	name    string // file name inside the bundle, for errors
	path    string // the file's path, for integrity errors
	data    []byte
	mapped  bool
	fields  []colField
	meta    map[string]string
	batches []block
	dicts   map[int64][]string
	opts    tableOpts
	check   integrity

	// checkLegacy with a manifest checksum: SHA-256 of data[:shaPos],
	// extended as batches are loaded in order (shaNext is the next one).
	sha     hash.Hash
	shaPos  int64
	shaNext int
}

// openTableFile maps path and parses its footer, schema and dictionaries.
func openTableFile(path, name string, o tableOpts) (*tableFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	tf := &tableFile{name: name, path: path, opts: o}
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
func newTableFileBytes(data []byte, name string, o tableOpts) (*tableFile, error) {
	tf := &tableFile{name: name, path: name, data: data, opts: o}
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

// integrityErr reports a failed integrity check of what (a batch, the
// footer, ...), naming the file by its path.
func (tf *tableFile) integrityErr(what string, err error) error {
	return fmt.Errorf("check %s: %s: %w", tf.path, what, err)
}

// newDecoder returns a batch decoder for this file: it checks zstd frame
// checksums when the file has no CRCs and is verified.
func (tf *tableFile) newDecoder() *batchDecoder {
	if tf.check == checkLegacy {
		return newCheckingDecoder()
	}
	return newBatchDecoder()
}

func (tf *tableFile) parse() (err error) {
	defer func() {
		// With checks on, a footer that does not parse is damage.
		if err != nil && tf.opts.verify && tf.fields == nil && !errors.Is(err, ErrIncomplete) {
			err = tf.integrityErr("footer", err)
		}
	}()
	defer catch(&err, "read "+tf.name)
	d := tf.data
	if len(d) < 8+4+6 || string(d[:6]) != "ARROW1" || string(d[len(d)-6:]) != "ARROW1" {
		if len(d) >= 6 && string(d[:6]) == "ARROW1" {
			return fmt.Errorf("read %s: no Arrow file footer (%d bytes); the writer may have been killed: run 'predictio trace repair': %w", tf.name, len(d), ErrIncomplete)
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
	if err := tf.chooseCheck(fend - flen); err != nil {
		return err
	}
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
	if tf.check == checkCRC {
		if err := tf.walk(fend-flen, dblocks); err != nil {
			return err
		}
	}
	tf.dicts = map[int64][]string{}
	dec := tf.newDecoder()
	for j, b := range dblocks {
		m, err := readMessage(d, int(b.off))
		if err != nil {
			return fmt.Errorf("read %s: dictionary %d: %w", tf.name, j, err)
		}
		if err := tf.addDictionary(dec, m); err != nil {
			return err
		}
	}
	if tf.sha != nil && len(tf.batches) == 0 {
		return tf.finishSHA()
	}
	return nil
}

// chooseCheck picks the file's integrity check and checks its footer
// (which starts at footerStart).
func (tf *tableFile) chooseCheck(footerStart int64) error {
	if !tf.opts.verify {
		tf.check = checkNone
		return nil
	}
	tail := tf.data[footerStart:]
	pos, err := footerCRCPos(tail[:len(tail)-10])
	if err != nil {
		return tf.integrityErr("footer", err)
	}
	if pos < 0 {
		if tf.opts.requireCRC || versionHasCRC(tf.meta[MetaFormatVersion]) {
			return tf.integrityErr("footer", fmt.Errorf("the schema has no %s, which format 1.1 requires: %w", MetaCRC32C, ErrCorrupt))
		}
		tf.check = checkLegacy
		if tf.opts.sha256 != "" {
			tf.sha = sha256.New()
		}
		return nil
	}
	tf.check = checkCRC
	got, want, ok := crcWithPlaceholder(tail, pos)
	if !ok {
		return tf.integrityErr("footer", fmt.Errorf("%s is not eight hex digits: %w", MetaCRC32C, ErrCorrupt))
	}
	if got != want {
		return tf.integrityErr("footer", fmt.Errorf("CRC32C %08x, stored %08x: the data changed after it was written (bit rot, an overwrite): %w", got, want, ErrCorrupt))
	}
	return nil
}

// versionHasCRC reports whether files of format version v carry CRCs.
func versionHasCRC(v string) bool {
	maj, rest, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	min, _, _ := strings.Cut(rest, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	return err1 == nil && err2 == nil && (a > 1 || a == 1 && b >= 1)
}

// walk checks the stream between the file magic and the footer (which
// starts at footerStart): the schema message and every dictionary message
// by CRC32C, that the stream's messages tile it up to an end-of-stream
// marker right before the footer, and that the footer's blocks are messages
// of that stream. Record batches are checked when loaded.
func (tf *tableFile) walk(footerStart int64, dblocks []block) (err error) {
	where := "schema message"
	var perr error // a panic of the flatbuffer accessors, converted by catch
	defer func() {
		if perr != nil {
			err = tf.integrityErr(where, perr)
		}
	}()
	defer catch(&perr, "read message")
	d := tf.data
	m, err := readMessage(d, 8)
	if err != nil || m.hdrType != msgSchema {
		return tf.integrityErr("schema message", fmt.Errorf("unreadable (%v): %w", err, ErrCorrupt))
	}
	_, meta := parseSchema(m.hdr)
	if ok, err := checkSchemaCRC(d, &m, meta); err != nil || !ok {
		if err == nil {
			err = errNoCRC
		}
		return tf.integrityErr("schema message", err)
	}
	dicts := make(map[int64]bool, len(dblocks))
	next, off := 0, int64(8+m.size)
	for {
		where = tf.where(off, next)
		if off >= footerStart {
			return tf.integrityErr(fmt.Sprintf("stream at offset %d", off), fmt.Errorf("no end-of-stream marker before the footer: %w", ErrCorrupt))
		}
		m, err := readMessage(d[:footerStart], int(off))
		if err != nil {
			return tf.integrityErr(tf.where(off, next), err)
		}
		switch m.hdrType {
		case 0:
			if off+int64(m.size) != footerStart {
				return tf.integrityErr(fmt.Sprintf("end-of-stream marker at offset %d", off), fmt.Errorf("%d bytes between it and the footer: %w", footerStart-off-int64(m.size), ErrCorrupt))
			}
			if next != len(tf.batches) {
				return tf.integrityErr("footer", fmt.Errorf("%d record batches in the footer, %d in the stream: %w", len(tf.batches), next, ErrCorrupt))
			}
			for _, b := range dblocks {
				if !dicts[b.off] {
					return tf.integrityErr("footer", fmt.Errorf("dictionary block at offset %d is not a dictionary message of the stream: %w", b.off, ErrCorrupt))
				}
			}
			return nil
		case msgRecordBatch:
			if next >= len(tf.batches) || tf.batches[next].off != off || tf.batches[next].end() != off+int64(m.size) {
				return tf.integrityErr(tf.where(off, next), fmt.Errorf("a record batch that is not batch %d of the footer: %w", next, ErrCorrupt))
			}
			next++
		case msgDictionaryBatch:
			if err := m.checkCRC(d); err != nil {
				return tf.integrityErr(fmt.Sprintf("dictionary message at offset %d", off), err)
			}
			dicts[off] = true
		default:
			return tf.integrityErr(tf.where(off, next), fmt.Errorf("unexpected message type %d: %w", m.hdrType, ErrCorrupt))
		}
		off += int64(m.size)
	}
}

// where names the message at off for errors: record batch next when the
// footer puts it there.
func (tf *tableFile) where(off int64, next int) string {
	if next < len(tf.batches) && tf.batches[next].off == off {
		return fmt.Sprintf("batch %d (offset %d)", next, off)
	}
	return fmt.Sprintf("message at offset %d", off)
}

// checkBatch checks the integrity of record batch i, loaded as m.
func (tf *tableFile) checkBatch(i int, m *message) error {
	switch tf.check {
	case checkCRC:
		if err := m.checkCRC(tf.data); err != nil {
			return tf.integrityErr(fmt.Sprintf("batch %d (offset %d)", i, m.off), err)
		}
	case checkLegacy:
		if tf.sha == nil {
			return nil
		}
		if i != tf.shaNext {
			tf.sha = nil // read out of order: the whole-file checksum cannot be followed
			return nil
		}
		if end := tf.batches[i].end(); end > tf.shaPos {
			tf.sha.Write(tf.data[tf.shaPos:end])
			tf.shaPos = end
		}
		if tf.shaNext++; tf.shaNext == len(tf.batches) {
			return tf.finishSHA()
		}
	}
	return nil
}

// finishSHA hashes the rest of the file and compares the SHA-256 with the
// manifest's.
func (tf *tableFile) finishSHA() error {
	tf.sha.Write(tf.data[tf.shaPos:])
	tf.shaPos = int64(len(tf.data))
	got := hex.EncodeToString(tf.sha.Sum(nil))
	tf.sha = nil
	if got != tf.opts.sha256 {
		return tf.integrityErr("whole file", fmt.Errorf("SHA-256 %s, %s says %s: the file changed after it was written (bit rot, an overwrite): %w", got, ManifestFile, tf.opts.sha256, ErrCorrupt))
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
// node is -1 for an optional column the file lacks.
type colRef struct {
	node, buf int
	typ       colType
}

func (r colRef) present() bool { return r.node >= 0 }

// columns lists a table's columns: the first required ones must be present
// (those of format 1.0), the others read as zero when absent.
type columns struct {
	names    []string
	types    []colType
	required int
}

// locate finds the columns by name, checking their types.
func (tf *tableFile) locate(cols *columns) ([]colRef, error) {
	names, want := cols.names, cols.types
	refs := make([]colRef, len(names))
	for i := range refs {
		refs[i].node = -1
	}
	node, buf := 0, 0
	var blocked string
	for _, f := range tf.fields {
		for i, n := range names {
			if n == f.name && !refs[i].present() {
				if blocked != "" {
					return nil, tf.errf("column %q follows column %q of a type this reader cannot skip (%s)", n, blocked, f.typ)
				}
				if !compatible(f.typ, want[i]) {
					return nil, tf.errf("column %s has type %s, want %s", n, f.typ, want[i])
				}
				refs[i] = colRef{node: node, buf: buf, typ: f.typ}
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
	for i, r := range refs[:cols.required] {
		if !r.present() {
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
	if err := tf.checkBatch(i, &m); err != nil {
		return err
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
