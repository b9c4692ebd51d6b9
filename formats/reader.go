package formats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// maxManifestBytes bounds manifest.json.
const maxManifestBytes = 64 << 20

// Bundle is an open trace bundle. Its methods may be called from one
// goroutine at a time; cursors are independent of each other.
type Bundle struct {
	dir    string
	man    Manifest
	verify bool
}

// OpenOption configures Open.
type OpenOption func(*openConfig)

type openConfig struct {
	verify bool
}

// NoVerify makes the bundle's readers skip the integrity checks (CRC32C,
// or for format 1.0 the zstd frame checksums and the SHA-256 against the
// manifest): corrupt data is then read as it is. The structural checks that
// keep a reader from panicking or allocating without bound stay on. Tools
// that take it must say in their output that verification was skipped.
func NoVerify() OpenOption { return func(c *openConfig) { c.verify = false } }

var skipVerify atomic.Bool

// SetDefaultVerify sets whether Open checks integrity when no OpenOption
// says otherwise (it does unless this was called with false). A command
// calls SetDefaultVerify(false) once, for --no-verify, before it opens
// bundles through packages that take no OpenOption (simulate, replay,
// train); libraries pass NoVerify to Open instead.
func SetDefaultVerify(on bool) { skipVerify.Store(!on) }

// DefaultVerify reports the default that SetDefaultVerify sets.
func DefaultVerify() bool { return !skipVerify.Load() }

// Open opens the bundle in dir and reads its manifest. It rejects a bundle
// whose major format version differs from FormatVersion's with an error
// wrapping ErrVersion that names both versions.
//
// Every table is checked while it is read (docs/format.md, Integrity): a
// failed check is an error wrapping ErrCorrupt that names the file and the
// batch. NoVerify skips the checks.
func Open(dir string, opts ...OpenOption) (*Bundle, error) {
	cfg := openConfig{verify: DefaultVerify()}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := readManifest(dir, ManifestFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, perr := os.Stat(filepath.Join(dir, PartialManifestFile)); perr == nil {
				return nil, fmt.Errorf("open bundle %s: no %s but a %s: the writer did not finish; run 'predictio trace repair %s': %w", dir, ManifestFile, PartialManifestFile, dir, ErrIncomplete)
			}
		}
		return nil, fmt.Errorf("open bundle: %w", err)
	}
	if err := checkVersion(m.FormatVersion); err != nil {
		return nil, fmt.Errorf("open bundle %s: %s: %w", dir, ManifestFile, err)
	}
	return &Bundle{dir: dir, man: *m, verify: cfg.verify}, nil
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

// Integrity says how a bundle's tables are checked while they are read.
type Integrity string

const (
	// IntegrityCRC32C: format 1.1 and later, a CRC32C per IPC message and
	// for the schema and footer of each table.
	IntegrityCRC32C Integrity = "crc32c"
	// IntegrityLegacy: format 1.0 tables have no CRCs; readers check the
	// zstd frame checksums of every buffer and, when the batches are read
	// in order, each file's SHA-256 against manifest.json.
	IntegrityLegacy Integrity = "zstd-checksums+sha256"
	// IntegritySkipped: NoVerify.
	IntegritySkipped Integrity = "skipped"
)

// Integrity returns how the bundle's tables are checked (by its manifest's
// format version), or IntegritySkipped after NoVerify.
func (b *Bundle) Integrity() Integrity {
	switch {
	case !b.verify:
		return IntegritySkipped
	case versionHasCRC(b.man.FormatVersion):
		return IntegrityCRC32C
	}
	return IntegrityLegacy
}

// Describe returns a sentence for people saying what Integrity means.
func (i Integrity) Describe() string {
	switch i {
	case IntegrityCRC32C:
		return "verified: CRC32C of every message, schema and footer"
	case IntegrityLegacy:
		return "verified as format 1.0 allows: zstd frame checksums, SHA-256 against manifest.json"
	}
	return "not verified (--no-verify): corrupt data would be read as it is"
}

// HasServiceTimes reports whether the bundle's access rows carry service
// times (manifest timing.service_times; format 1.1): ts_ns is an
// operation's start and end_ns its completion. Without them, end_ns reads as
// 0 and tools must fall back to ts_ns alone; with them a row's end_ns may
// still be 0 (unknown).
func (b *Bundle) HasServiceTimes() bool { return b.man.Timing.ServiceTimes }

// Columns returns the column names of a table file (FilesFile,
// AccessesFile or HintsFile) in file order. A bundle without hints.arrow has
// no hints columns.
func (b *Bundle) Columns(table string) ([]string, error) {
	if table == HintsFile && !b.hasHints() {
		return nil, nil
	}
	tf, err := b.openTable(table)
	if err != nil {
		return nil, err
	}
	defer tf.close()
	out := make([]string, len(tf.fields))
	for i, f := range tf.fields {
		out[i] = f.name
	}
	return out, nil
}

// HasColumn reports whether a table file has the named column. Columns of
// format 1.1 are absent from 1.0 bundles, and read as zero there.
func (b *Bundle) HasColumn(table, column string) (bool, error) {
	cols, err := b.Columns(table)
	return slices.Contains(cols, column), err
}

func (b *Bundle) hasHints() bool {
	_, err := os.Stat(filepath.Join(b.dir, HintsFile))
	return !errors.Is(err, os.ErrNotExist)
}

func (b *Bundle) openTable(name string) (*tableFile, error) {
	o := tableOpts{verify: b.verify, requireCRC: versionHasCRC(b.man.FormatVersion)}
	if ti, ok := b.man.Tables[name]; ok {
		o.sha256 = ti.SHA256
	}
	tf, err := openTableFile(filepath.Join(b.dir, name), name, o)
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

// tableColumns derives a table's column list from its schema; the first
// required columns are those of format 1.0.
func tableColumns(s *arrow.Schema, required int) *columns {
	c := &columns{required: required}
	for _, f := range s.Fields() {
		c.names = append(c.names, f.Name)
		c.types = append(c.types, wantType(f.Type))
	}
	return c
}

var (
	filesCols    = tableColumns(FilesSchema, 6)
	accessesCols = tableColumns(AccessesSchema, 8)
	hintsCols    = tableColumns(HintsSchema, 10)
)

// columnsOf returns the column list of a table file name.
func columnsOf(name string) *columns {
	switch name {
	case FilesFile:
		return filesCols
	case AccessesFile:
		return accessesCols
	case HintsFile:
		return hintsCols
	}
	return nil
}

// Files returns all rows of files.arrow.
//
// A format 1.0 files.arrow has no mode column: Mode reads as 0, except for
// rows with Ino 0 (imported traces), whose Mode reads as ModeRegular
// (ModeBlock for block-trace imports, recording source import:blkparse and
// import:csv), so that they do not read as path-only: 1.0 has none.
func (b *Bundle) Files() ([]File, error) {
	tf, err := b.openTable(FilesFile)
	if err != nil {
		return nil, err
	}
	defer tf.close()
	legacy := ModeRegular
	if s := b.man.Recording.Source; s == "import:blkparse" || s == "import:csv" {
		legacy = ModeBlock
	}
	return readFiles(tf, legacy)
}

// readFiles reads files.arrow; a file without the mode column gives rows
// with Ino 0 legacyMode.
func readFiles(tf *tableFile, legacyMode uint32) (out []File, err error) {
	refs, err := tf.locate(filesCols)
	if err != nil {
		return nil, err
	}
	if refs[6].present() {
		legacyMode = 0
	}
	dec := tf.newDecoder()
	var z zeroBuf
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
		mode, err6 := z.column(dec, refs[6], 4)
		if err := errors.Join(err1, err2, err3, err4, err5, err6, checkNode(dec, refs[3].node, n)); err != nil {
			return nil, fmt.Errorf("read %s: batch %d: %w", tf.name, bi, err)
		}
		offs, data, err := decodeUtf8(dec, refs[3].buf, n)
		if err != nil {
			return nil, fmt.Errorf("read %s: batch %d: column path: %w", tf.name, bi, err)
		}
		ids, devs, inos, sizes, mts, modes := asU32(id), asU64(dev), asU64(ino), asU64(size), asU64(mt), asU32(mode)
		for i := 0; i < n; i++ {
			f := File{ID: ids[i], Dev: devs[i], Ino: inos[i], Path: string(data[offs[i]:offs[i+1]]), Size: sizes[i], MtimeNS: int64(mts[i]), Mode: modes[i]}
			if f.Ino == 0 && legacyMode != 0 {
				f.Mode = legacyMode
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// zeroBuf supplies the zero values of optional columns a file lacks. It
// grows to the largest batch and is then reused.
type zeroBuf struct{ b []uint64 }

// column returns the data buffer of the fixed-width column r, or zeros when
// the file lacks it.
func (z *zeroBuf) column(dec *batchDecoder, r colRef, width int) ([]byte, error) {
	if r.present() {
		return fixed(dec, r, width)
	}
	n := dec.rows * width
	if len(z.b)*8 < n {
		z.b = make([]uint64, (n+7)/8)
	}
	if n == 0 {
		return nil, nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&z.b[0])), n), nil
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
	opts, path := mapped.opts, mapped.path
	mapped.close()
	tf, err := newTableFileBytes(data, name, opts)
	if err != nil {
		return nil, err
	}
	tf.path = path
	if tf.sha != nil {
		// Raw access may read batches in any order: check the whole file now.
		if err := tf.finishSHA(); err != nil {
			return nil, err
		}
	}
	if err := tf.checkArrowSafe(); err != nil {
		return nil, err
	}
	fr, err := newArrowReader(bytes.NewReader(tf.data), int64(len(tf.data)), name)
	if err != nil {
		tf.close()
		return nil, err
	}
	return &Table{tf: tf, fr: fr, dec: tf.newDecoder()}, nil
}

// Integrity returns how the table's contents are checked.
func (t *Table) Integrity() Integrity {
	switch t.tf.check {
	case checkCRC:
		return IntegrityCRC32C
	case checkLegacy:
		return IntegrityLegacy
	}
	return IntegritySkipped
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
	if err == nil && t.tf.check == checkCRC {
		if err := t.tf.checkBatch(i, &m); err != nil {
			return nil, err
		}
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
