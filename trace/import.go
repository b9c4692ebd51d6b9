package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/predictio/predictio/formats"
)

// ImportOptions configures Import.
type ImportOptions struct {
	// From is the source format: "fio", "blkparse" or "csv".
	From string
	// Map is the CSV column mapping, "field=column,...", where column is a
	// 0-based index or, with a header line, a column name. Fields: ts,
	// offset, size (required), op, dev, host, pid, comm.
	Map string
	// Preset fills Map and TSUnit for a known CSV layout: "msr" or
	// "alibaba". An explicit Map or TSUnit overrides the preset's.
	Preset string
	// TSUnit is the unit of CSV timestamps: ns (default), us, ms, s
	// (relative), or filetime (100 ns ticks since 1601, MSR), unix-s,
	// unix-ms, unix-us, unix-ns (absolute; the manifest gets the wall-clock
	// start). Timestamps are rebased so that the earliest is 0.
	TSUnit string
	// Header says the first CSV line holds column names. It is implied when
	// Map uses names.
	Header bool
	// Ops selects which operations become accesses: "read" (default) or
	// "all" (reads and writes; the bundle cannot tell them apart).
	Ops string
	// Action is the blkparse action imported: "Q" (queued, default), "D"
	// (issued to the driver) or "C" (completed).
	Action string
	// PageSize converts byte offsets to pages; 0 means this machine's.
	PageSize int
	// CommandLine is recorded in the manifest.
	CommandLine []string
}

// ImportReport says what Import did.
type ImportReport struct {
	Source  string            `json:"source"`
	Lines   uint64            `json:"lines"`
	Events  uint64            `json:"events"`
	Files   int               `json:"files"`
	Skipped map[string]uint64 `json:"skipped"` // by operation: writes (with Ops "read"), other ops, zero-length I/O
	Notes   []string          `json:"notes"`
}

// maxLineBytes bounds one input line; longer lines are an error.
const maxLineBytes = 1 << 20

// Import converts the trace in file src into a new bundle at out. Every
// byte range becomes one access of kind imported covering the pages it
// touches; see docs/trace.md for what each source lacks.
func Import(src, out string, o ImportOptions) (*ImportReport, error) {
	if o.Ops == "" {
		o.Ops = "read"
	}
	if o.Ops != "read" && o.Ops != "all" {
		return nil, usageErr("--ops %q: want read or all", o.Ops)
	}
	ps := uint64(o.PageSize)
	if ps == 0 {
		ps = uint64(formats.PageSize())
	}
	if ps&(ps-1) != 0 {
		return nil, usageErr("--page-size %d: want a power of two", ps)
	}
	var parse func(im *importer, r io.Reader) error
	switch o.From {
	case "fio":
		parse = func(im *importer, r io.Reader) error { return parseFio(im, src, r) }
	case "blkparse":
		if o.Action == "" {
			o.Action = "Q"
		}
		if o.Action != "Q" && o.Action != "D" && o.Action != "C" {
			return nil, usageErr("--action %q: want Q, D or C", o.Action)
		}
		parse = func(im *importer, r io.Reader) error { return parseBlkparse(im, src, r, o.Action) }
	case "csv":
		cm, err := newCSVMapping(o)
		if err != nil {
			return nil, err
		}
		parse = func(im *importer, r io.Reader) error { return parseCSV(im, src, cm) }
	default:
		return nil, usageErr("--from %q: want fio, blkparse or csv", o.From)
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer f.Close()

	// Pass 1 learns the files and their sizes (the furthest byte accessed),
	// so that pass 2 can write each file's row before the accesses that
	// reference it.
	mode := formats.ModeRegular
	if o.From != "fio" {
		mode = formats.ModeBlock
	}
	newImporter := func(w accessAppender) *importer {
		return &importer{
			w: w, ps: ps, all: o.Ops == "all", mode: mode,
			files: map[string]uint32{},
			rep:   ImportReport{Source: "import:" + o.From, Skipped: map[string]uint64{}},
		}
	}
	first := newImporter(discard{})
	if err := parse(first, f); err != nil {
		return nil, fmt.Errorf("import %s: %w", o.From, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("import: %s must be a regular file (import reads it twice): %w", src, err)
	}
	w, err := formats.Create(out)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	abort := func(err error) (*ImportReport, error) {
		w.Abort()
		os.RemoveAll(out)
		return nil, err
	}
	for _, fr := range first.fileRows {
		if err := w.AddFile(fr); err != nil {
			return abort(fmt.Errorf("import: write %s: %w", formats.FilesFile, err))
		}
	}
	im := newImporter(w)
	im.files, im.fileRows = first.files, first.fileRows
	if err := parse(im, f); err != nil {
		return abort(fmt.Errorf("import %s: %w", o.From, err))
	}
	if im.rep.Events != first.rep.Events || len(im.fileRows) != len(first.fileRows) {
		return abort(fmt.Errorf("import: %s changed while it was read (%d events, then %d)", src, first.rep.Events, im.rep.Events))
	}
	m := w.Manifest()
	m.ToolVersion = ToolVersion
	m.Host = formats.Host{PageSize: int(ps), Hostname: im.hostname}
	m.Recording = formats.Recording{Source: im.rep.Source, CommandLine: o.CommandLine}
	m.Start = formats.Timestamp{MonotonicNS: im.first}
	m.End = formats.Timestamp{MonotonicNS: im.last}
	if !im.wallBase.IsZero() {
		m.Start.Wall = im.wallBase.Add(time.Duration(im.first))
		m.End.Wall = im.wallBase.Add(time.Duration(im.last))
	}
	m.Counters = formats.Counters{Events: im.rep.Events, Files: uint64(len(im.fileRows))}
	im.rep.Files = len(im.fileRows)
	im.rep.Notes = append(im.rep.Notes, fmt.Sprintf("imported from %s (%s), %d lines, page size %d", src, o.From, im.rep.Lines, ps))
	for _, op := range sortedKeys(im.rep.Skipped) {
		im.rep.Notes = append(im.rep.Notes, fmt.Sprintf("skipped %d %s records", im.rep.Skipped[op], op))
	}
	im.rep.Notes = append(im.rep.Notes, im.notes...)
	m.Notes = append(m.Notes, im.rep.Notes...)
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("import: close bundle %s: %w", out, err)
	}
	return &im.rep, nil
}

// importer turns byte-range records into bundle rows.
type importer struct {
	w    accessAppender
	ps   uint64
	all  bool
	mode uint32 // file type bits of the rows it makes

	files    map[string]uint32 // key -> file id = index in fileRows
	fileRows []formats.File
	rep      ImportReport
	first    uint64
	last     uint64
	haveTS   bool
	a        formats.Access
	hostname string
	wallBase time.Time // wall-clock time of ts 0, when the source has one
	notes    []string
}

// accessAppender is where importer writes rows: a *formats.Writer, or a
// slice in tests.
type accessAppender interface {
	Append(a *formats.Access) error
}

// discard is the appender of the first pass.
type discard struct{}

func (discard) Append(*formats.Access) error { return nil }

// op classes of an imported record.
const (
	opRead = iota
	opWrite
	opOther
)

// classifyOp maps an operation name of fio or a CSV column to read, write
// or other.
func classifyOp(s string) int {
	switch strings.ToLower(s) {
	case "r", "read", "rs", "ra", "rm", "0":
		return opRead
	case "w", "write", "ws", "wm", "1":
		return opWrite
	}
	return opOther
}

// file returns the file id for key, creating a row from f on first use.
func (im *importer) file(key string, f formats.File) uint32 {
	if id, ok := im.files[key]; ok {
		return id
	}
	f.ID = uint32(len(im.fileRows))
	if f.Mode == 0 && f.Ino == 0 {
		f.Mode = im.mode // the type is known, the inode not: not path-only
		if strings.HasPrefix(f.Path, "/dev/") {
			f.Mode = formats.ModeBlock
		}
	}
	im.files[key] = f.ID
	im.fileRows = append(im.fileRows, f)
	return f.ID
}

// add appends one access of length bytes at offset of file id, or counts
// it as skipped.
func (im *importer) add(ts uint64, id uint32, offset, length uint64, op int, opName string, pid uint32, comm string) error {
	if op == opOther || (op == opWrite && !im.all) || length == 0 {
		if length == 0 && op != opOther {
			opName += " (zero length)"
		}
		im.rep.Skipped[strings.ToLower(opName)]++
		return nil
	}
	if offset+length < offset {
		return errors.New("offset + size overflows 64 bits")
	}
	firstPage := offset / im.ps
	n := (offset+length-1)/im.ps - firstPage + 1
	if n > 1<<32-1 {
		return fmt.Errorf("size %d spans more than 2^32 pages", length)
	}
	if end := offset + length; end > im.fileRows[id].Size {
		im.fileRows[id].Size = end
	}
	im.a = formats.Access{TS: ts, PID: pid, TID: pid, Comm: comm, FileID: id, FirstPage: firstPage, NPages: uint32(n), Kind: formats.KindImported}
	if !im.haveTS || ts < im.first {
		im.first = ts
	}
	if !im.haveTS || ts > im.last {
		im.last = ts
	}
	im.haveTS = true
	im.rep.Events++
	return im.w.Append(&im.a)
}

// lineReader yields lines with their 1-based numbers and bounds their length.
type lineReader struct {
	name    string
	sc      *bufio.Scanner
	n       uint64
	tooLong bool
}

func newLineReader(name string, r io.Reader) *lineReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	return &lineReader{name: name, sc: sc}
}

func (l *lineReader) next() (string, bool) {
	if !l.sc.Scan() {
		return "", false
	}
	l.n++
	return strings.TrimRight(l.sc.Text(), "\r"), true
}

func (l *lineReader) err() error {
	if err := l.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%s:%d: line longer than %d bytes", l.name, l.n+1, maxLineBytes)
		}
		return fmt.Errorf("read %s: %w", l.name, err)
	}
	return nil
}

// fieldErr names the file, line and field of a parse error.
func (l *lineReader) fieldErr(field, value string, err error) error {
	if len(value) > 64 {
		value = value[:64] + "..."
	}
	if err == nil {
		return fmt.Errorf("%s:%d: field %s: bad value %q", l.name, l.n, field, value)
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		err = ne.Err
	}
	return fmt.Errorf("%s:%d: field %s: bad value %q: %w", l.name, l.n, field, value, err)
}

// parseScaled parses a non-negative decimal number (with an optional
// fraction) and multiplies it by scale exactly, e.g. "1.5" with scale 1e9
// is 1500000000. Fraction digits beyond the scale's precision are dropped.
func parseScaled(s string, scale uint64) (uint64, error) {
	ip, fp, hasFrac := strings.Cut(s, ".")
	if ip == "" && (!hasFrac || fp == "") {
		return 0, strconv.ErrSyntax
	}
	var v uint64
	if ip != "" {
		n, err := strconv.ParseUint(ip, 10, 64)
		if err != nil {
			return 0, err
		}
		if n != 0 && n*scale/n != scale {
			return 0, strconv.ErrRange
		}
		v = n * scale
	}
	if hasFrac {
		div := uint64(1)
		for _, c := range fp {
			if c < '0' || c > '9' {
				return 0, strconv.ErrSyntax
			}
			if div >= 1e18 {
				continue
			}
			div *= 10
			// scale <= 1e9 here, so digit*scale does not overflow.
			add := uint64(c-'0') * scale / div
			if v+add < v {
				return 0, strconv.ErrRange
			}
			v += add
		}
	}
	return v, nil
}
