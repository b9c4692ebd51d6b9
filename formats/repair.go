package formats

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// RepairReport says what Repair did.
type RepairReport struct {
	// Tables maps each table file name to the rows it holds after repair.
	Tables map[string]uint64
	// DroppedBytes maps a table file name to the bytes cut from its end
	// (a partly written batch).
	DroppedBytes map[string]int64
	// Notes describe each action taken; they are also added to the
	// manifest's notes.
	Notes []string
	// AlreadyComplete is true when the bundle had a manifest.json and sound
	// tables, so nothing was changed.
	AlreadyComplete bool
}

// Repair recovers a bundle whose writer was killed (SIGKILL, power cut, or
// Abort) up to its last complete batch: every batch written before the kill
// (all of them up to the last Flush) is kept. For each table without a
// footer it scans the IPC stream after the file magic, stops at the first
// truncated or corrupt message, cuts the file there and writes the
// dictionaries and footer. It then writes manifest.json from
// manifest.partial.json with Complete=false, the recovered counts and
// checksums, and a note.
func Repair(dir string) (*RepairReport, error) {
	rep := &RepairReport{Tables: map[string]uint64{}, DroppedBytes: map[string]int64{}}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err == nil {
		if errs := Verify(dir); len(errs) == 0 {
			rep.AlreadyComplete = true
			rep.Notes = append(rep.Notes, "bundle is complete and verifies; nothing to repair")
			return rep, nil
		}
	}
	m, err := readManifest(dir, PartialManifestFile)
	if err != nil {
		m, err = readManifest(dir, ManifestFile)
	}
	if err != nil {
		if _, serr := os.Stat(filepath.Join(dir, AccessesFile)); serr != nil {
			return nil, fmt.Errorf("repair %s: no manifest and no %s: not a bundle", dir, AccessesFile)
		}
		m = &Manifest{FormatVersion: FormatVersion}
		rep.Notes = append(rep.Notes, "no manifest found: host, recording and time fields are unknown")
	}
	if err := checkVersion(m.FormatVersion); err != nil {
		return nil, fmt.Errorf("repair %s: %w", dir, err)
	}
	m.Tables = map[string]TableInfo{}
	var maxTS uint64
	for _, name := range []string{FilesFile, AccessesFile, HintsFile} {
		ti, dropped, note, err := repairTable(dir, name)
		if err != nil {
			return nil, fmt.Errorf("repair %s: %w", dir, err)
		}
		if note != "" {
			rep.Notes = append(rep.Notes, note)
		}
		m.Tables[name] = ti
		rep.Tables[name] = ti.Rows
		if dropped > 0 {
			rep.DroppedBytes[name] = dropped
		}
	}
	// Counts and end time reflect what was recovered.
	b := &Bundle{dir: dir, man: *m, verify: true}
	var span WallSpan
	if ac, err := b.Accesses(); err == nil {
		for ac.Next() {
			a := ac.At()
			maxTS = max(maxTS, a.TS, a.EndNS)
			span.Add(a.Kind, a.TS, a.EndNS)
		}
		ac.Close()
	}
	span.SetTiming(&m.Timing)
	if hc, err := b.Hints(); err == nil {
		for hc.Next() {
			maxTS = max(maxTS, hc.At().TS)
		}
		hc.Close()
	}
	m.Counters.Files = rep.Tables[FilesFile]
	m.Counters.Events = rep.Tables[AccessesFile]
	m.Counters.Hints = rep.Tables[HintsFile]
	if m.End.MonotonicNS == 0 || m.End.MonotonicNS < maxTS {
		m.End.MonotonicNS = maxTS
		if !m.Start.Wall.IsZero() && maxTS >= m.Start.MonotonicNS {
			m.End.Wall = m.Start.Wall.Add(time.Duration(maxTS - m.Start.MonotonicNS))
		}
	}
	m.Complete = false
	note := fmt.Sprintf("repaired %s: recovered %d accesses, %d hints, %d files", time.Now().UTC().Format(time.RFC3339), rep.Tables[AccessesFile], rep.Tables[HintsFile], rep.Tables[FilesFile])
	rep.Notes = append(rep.Notes, note)
	m.Notes = append(m.Notes, rep.Notes...)
	if err := writeJSONAtomic(dir, ManifestFile, m); err != nil {
		return nil, fmt.Errorf("repair %s: %w", dir, err)
	}
	os.Remove(filepath.Join(dir, PartialManifestFile))
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("repair %s: %w", dir, err)
	}
	return rep, nil
}

// repairTable makes one table file a valid Arrow file.
func repairTable(dir, name string) (TableInfo, int64, string, error) {
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && st.Size() < int64(len(arrowMagic))) {
		// Killed before the table was started: write an empty one.
		if err := writeEmptyTable(path, name); err != nil {
			return TableInfo{}, 0, "", err
		}
		ti, err := tableInfo(path, name)
		return ti, 0, fmt.Sprintf("%s: missing or empty; wrote an empty table", name), err
	}
	if err != nil {
		return TableInfo{}, 0, "", err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return TableInfo{}, 0, "", fmt.Errorf("read %s: %w", name, err)
	}
	if _, err := newTableFileBytes(data, name, tableOpts{verify: true}); err == nil {
		ti, err := tableInfo(path, name)
		if err != nil {
			return TableInfo{}, 0, "", damaged(name, err)
		}
		return ti, 0, "", nil
	} else if len(data) >= 14 && string(data[len(data)-6:]) == "ARROW1" && !errors.Is(err, ErrIncomplete) {
		// A writer that is killed never leaves the closing magic: the file
		// was complete and has been damaged since.
		return TableInfo{}, 0, "", damaged(name, err)
	}
	sc := scanStream(data, name)
	if sc.schemaEnd == 0 {
		if err := writeEmptyTable(path, name); err != nil {
			return TableInfo{}, 0, "", err
		}
		ti, err := tableInfo(path, name)
		return ti, int64(len(data)), fmt.Sprintf("%s: no readable schema (%v); wrote an empty table", name, sc.stop), err
	}
	schema, err := streamSchema(data[len(arrowMagic):sc.schemaEnd])
	if err != nil {
		return TableInfo{}, 0, "", fmt.Errorf("repair %s: %w", name, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return TableInfo{}, 0, "", fmt.Errorf("repair %s: %w", name, err)
	}
	defer f.Close()
	if err := f.Truncate(sc.end); err != nil {
		return TableInfo{}, 0, "", fmt.Errorf("repair %s: %w", name, err)
	}
	if _, err := f.Seek(sc.end, 0); err != nil {
		return TableInfo{}, 0, "", fmt.Errorf("repair %s: %w", name, err)
	}
	tw := &tableWriter{name: name, schema: schema, f: f, h: nopHash{}, pos: sc.end, batches: sc.batches, enc: newBatchEncoder()}
	if len(tw.batches) == 0 {
		writeEmptyBatch(tw)
	}
	if err := tw.finish(func() []block { return fullDicts(tw, sc.fields, sc.dicts) }); err != nil {
		return TableInfo{}, 0, "", fmt.Errorf("repair %s: %w", name, err)
	}
	ti, err := tableInfo(path, name)
	dropped := int64(len(data)) - sc.end
	note := fmt.Sprintf("%s: recovered %d rows in %d batches; cut %d bytes (%v)", name, sc.rows, len(sc.batches), dropped, sc.stop)
	return ti, dropped, note, err
}

// damaged is Repair's error for a table that was complete and is corrupt.
func damaged(name string, err error) error {
	return fmt.Errorf("%s is damaged, not truncated: repair only recovers a bundle whose writer was killed; restore the file from a copy (%w)", name, err)
}

// streamSchema decodes a Schema message (without the file magic) with
// arrow-go, for the footer repair writes.
func streamSchema(msg []byte) (s *arrow.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode schema: malformed data (%v): %w", r, ErrCorrupt)
		}
	}()
	b := append(bytes.Clone(msg), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0)
	r, err := ipc.NewReader(bytes.NewReader(b), ipc.WithAllocator(&limitAllocator{max: maxBufferBytes}))
	if err != nil {
		return nil, fmt.Errorf("decode schema: %w", err)
	}
	defer r.Release()
	return r.Schema(), nil
}

// fullDicts writes one non-delta dictionary message per dictionary column
// of fields, with the values in vals (the fixed kind names when a kind_name
// dictionary was never written), and returns their blocks.
func fullDicts(tw *tableWriter, fields []colField, vals map[int64][]string) []block {
	var out []block
	for _, f := range fields {
		if !f.typ.dict {
			continue
		}
		v, ok := vals[f.typ.dictID]
		if !ok && f.name == "kind_name" {
			v = accessKindDict
			if tw.name == HintsFile {
				v = hintKindDict
			}
		}
		d := &dictState{id: f.typ.dictID, vals: v}
		out = append(out, d.emit(tw, true))
	}
	return out
}

type nopHash struct{}

func (nopHash) Write(p []byte) (int, error) { return len(p), nil }
func (nopHash) Sum(b []byte) []byte         { return b }
func (nopHash) Reset()                      {}
func (nopHash) Size() int                   { return 0 }
func (nopHash) BlockSize() int              { return 1 }

// tableInfo checks every batch of a table file and returns its checksum and
// row count.
func tableInfo(path, name string) (TableInfo, error) {
	tf, err := openTableFile(path, name, tableOpts{verify: true})
	if err != nil {
		return TableInfo{}, err
	}
	var rows uint64
	dec := tf.newDecoder()
	for i := range tf.batches {
		if err := tf.loadBatch(dec, i); err != nil {
			tf.close()
			return TableInfo{}, err
		}
		rows += uint64(dec.rows)
	}
	tf.close()
	sum, size, err := fileSHA256(path)
	if err != nil {
		return TableInfo{}, fmt.Errorf("checksum %s: %w", name, err)
	}
	return TableInfo{SHA256: sum, Rows: rows, Bytes: size}, nil
}

func writeEmptyTable(path, name string) error {
	os.Remove(path)
	dir := filepath.Join(filepath.Dir(path))
	tw, err := newTableWriter(dir, name, newBatchEncoder())
	if err != nil {
		return err
	}
	defer tw.f.Close()
	writeEmptyBatch(tw)
	sm, err := schemaMessage(tw.schema)
	if err != nil {
		return err
	}
	m, err := readMessage(sm, 0)
	if err != nil {
		return err
	}
	fields, _ := parseSchema(m.hdr)
	return tw.finish(func() []block { return fullDicts(tw, fields, nil) })
}

// streamScan is what scanStream found in a table file without footer.
type streamScan struct {
	schemaEnd int64 // end of the schema message; 0 if none
	end       int64 // end of the last good message
	fields    []colField
	batches   []block
	rows      uint64
	dicts     map[int64][]string // accumulated dictionaries
	stop      error              // why scanning stopped
}

// scanStream reads the IPC stream that follows the file magic, checking
// each message (its CRC32C when the schema has one, and every buffer of
// every record batch decoded with zstd checksums on), and stops at the
// first message that is truncated or corrupt.
func scanStream(data []byte, name string) (sc streamScan) {
	defer func() {
		if r := recover(); r != nil {
			sc.stop = fmt.Errorf("scan %s: malformed data (%v): %w", name, r, ErrCorrupt)
		}
	}()
	if len(data) < 8 || string(data[:6]) != "ARROW1" {
		sc.stop = fmt.Errorf("bad magic")
		return sc
	}
	off := 8
	m, err := readMessage(data, off)
	if err != nil || m.hdrType != msgSchema {
		sc.stop = fmt.Errorf("schema message: %v", err)
		return sc
	}
	var fields []colField
	var meta map[string]string
	func() {
		defer catch(&err, "schema")
		fields, meta = parseSchema(m.hdr)
	}()
	if err != nil {
		sc.stop = err
		return sc
	}
	withCRC, err := checkSchemaCRC(data, &m, meta)
	if err != nil {
		sc.stop = err
		return sc
	}
	tf := &tableFile{name: name, fields: fields, dicts: map[int64][]string{}}
	if cols := columnsOf(name); cols != nil {
		if _, err := tf.locate(cols); err != nil {
			sc.stop = err
			return sc
		}
	}
	off += m.size
	sc.schemaEnd, sc.end, sc.fields = int64(off), int64(off), fields
	dec := newCheckingDecoder()
	for {
		if off == len(data) {
			sc.stop = fmt.Errorf("end of file")
			return sc
		}
		m, err := readMessage(data, off)
		if err != nil {
			sc.stop = err
			return sc
		}
		if withCRC && m.hdrType != 0 {
			if err := m.checkCRC(data); err != nil {
				sc.stop = fmt.Errorf("message at offset %d: %w", off, err)
				return sc
			}
		}
		switch m.hdrType {
		case 0:
			sc.stop = fmt.Errorf("end of stream")
			return sc
		case msgDictionaryBatch:
			if err := tf.addDictionary(dec, m); err != nil {
				sc.stop = err
				return sc
			}
		case msgRecordBatch:
			if err := checkBatch(dec, m); err != nil {
				sc.stop = fmt.Errorf("batch %d at offset %d: %w", len(sc.batches), off, err)
				return sc
			}
			sc.batches = append(sc.batches, block{off: int64(off), metaLen: int32(m.size - len(m.body)), bodyLen: int64(len(m.body))})
			sc.rows += uint64(dec.rows)
		default:
			sc.stop = fmt.Errorf("unexpected message type %d at offset %d", m.hdrType, off)
			return sc
		}
		off += m.size
		sc.end = int64(off)
		sc.dicts = maps.Clone(tf.dicts)
	}
}

// checkSchemaCRC checks the CRC32C of the file's first bytes up to the end
// of the Schema message m, and reports whether the file carries CRCs. A
// schema of format 1.1 or later without one is corrupt.
func checkSchemaCRC(data []byte, m *message, meta map[string]string) (bool, error) {
	pos, err := schemaCRCPos(m.hdr)
	if err != nil {
		return false, err
	}
	if pos < 0 {
		if versionHasCRC(meta[MetaFormatVersion]) {
			return false, fmt.Errorf("schema message: %w", errNoCRC)
		}
		return false, nil
	}
	got, want, ok := crcWithPlaceholder(data[:m.off+m.size], m.metaStart()+pos)
	if !ok || got != want {
		return false, fmt.Errorf("schema message: CRC32C %08x, stored %08x: %w", got, want, ErrCorrupt)
	}
	return true, nil
}

// checkBatch decodes every buffer of a record batch message.
func checkBatch(dec *batchDecoder, m message) error {
	if err := dec.load(m.hdr, m.body); err != nil {
		return err
	}
	for i := range dec.bufs {
		if _, err := dec.buffer(i, 0, maxBufferBytes); err != nil {
			return err
		}
	}
	for _, n := range dec.nodes[:min(1, len(dec.nodes))] {
		if n.len != int64(dec.rows) {
			return fmt.Errorf("field node length %d, batch length %d: %w", n.len, dec.rows, ErrCorrupt)
		}
	}
	return nil
}
