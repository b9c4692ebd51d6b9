package formats

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

var schemaMsgCache sync.Map // *arrow.Schema -> []byte

// schemaMessage returns the framed IPC Schema message for s, as arrow-go
// serializes it.
func schemaMessage(s *arrow.Schema) ([]byte, error) {
	if m, ok := schemaMsgCache.Load(s); ok {
		return m.([]byte), nil
	}
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(s))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	b := buf.Bytes()
	if len(b) < 16 {
		return nil, fmt.Errorf("encode schema: %d bytes", len(b))
	}
	m := bytes.Clone(b[:len(b)-8]) // strip end-of-stream marker
	schemaMsgCache.Store(s, m)
	return m, nil
}

var filePrefixCache sync.Map // *arrow.Schema -> []byte

// filePrefix returns what a table file of schema s starts with: the file
// magic and the Schema message, whose schema metadata MetaCRC32C holds the
// CRC32C of these bytes (computed with the value read as '0's).
func filePrefix(s *arrow.Schema) ([]byte, error) {
	if m, ok := filePrefixCache.Load(s); ok {
		return m.([]byte), nil
	}
	sm, err := schemaMessage(s)
	if err != nil {
		return nil, err
	}
	p := append(bytes.Clone(arrowMagic), sm...)
	m, err := readMessage(p, len(arrowMagic))
	if err != nil || m.hdrType != msgSchema {
		return nil, fmt.Errorf("encode schema: cannot read back the schema message (%v)", err)
	}
	pos, err := schemaCRCPos(m.hdr)
	if err != nil || pos < 0 {
		return nil, fmt.Errorf("encode schema: no %s in the schema metadata (%v)", MetaCRC32C, err)
	}
	pos += m.metaStart()
	c, _, _ := crcWithPlaceholder(p, pos)
	putCRC(p[pos:pos+8], c)
	filePrefixCache.Store(s, p)
	return p, nil
}

// schemaCRCPos returns the offset in st.b of the MetaCRC32C value in the
// metadata of Schema table st, or -1 when there is none.
func schemaCRCPos(st fbTable) (pos int, err error) {
	defer catch(&err, "read schema metadata")
	pos, v := st.findMeta(2, MetaCRC32C)
	if pos >= 0 && len(v) != 8 {
		return 0, fmt.Errorf("schema metadata %s has %d bytes, want 8: %w", MetaCRC32C, len(v), ErrCorrupt)
	}
	return pos, nil
}

// footerTail returns the end of a table file after its end-of-stream
// marker: the footer, its length and the magic, with the footer schema's
// MetaCRC32C set to the CRC32C of these bytes (computed with the value read
// as '0's). A schema without MetaCRC32C (format 1.0) is left without.
func footerTail(footer []byte) ([]byte, error) {
	tail := make([]byte, 0, len(footer)+10)
	tail = append(tail, footer...)
	tail = binary.LittleEndian.AppendUint32(tail, uint32(len(footer)))
	tail = append(tail, "ARROW1"...)
	pos, err := footerCRCPos(footer)
	if err != nil {
		return nil, err
	}
	if pos < 0 {
		return tail, nil // a format 1.0 schema, as Repair keeps it
	}
	c, _, _ := crcWithPlaceholder(tail, pos)
	putCRC(tail[pos:pos+8], c)
	return tail, nil
}

// footerCRCPos returns the offset in footer of the footer schema's
// MetaCRC32C value, or -1.
func footerCRCPos(footer []byte) (pos int, err error) {
	defer catch(&err, "read footer")
	st, ok := fbRoot(footer).table(1)
	if !ok {
		return 0, fmt.Errorf("read footer: no schema: %w", ErrCorrupt)
	}
	return schemaCRCPos(st)
}

// buildFooter returns the Arrow file footer flatbuffer for schema s with the
// given dictionary and record batch blocks. arrow-go serializes the schema:
// it writes a scratch file with as many empty batches, whose footer blocks
// are then overwritten with the real ones.
func buildFooter(s *arrow.Schema, dicts, recs []block) ([]byte, error) {
	var buf bytes.Buffer
	fw, err := ipc.NewFileWriter(&buf, ipc.WithSchema(s))
	if err != nil {
		return nil, fmt.Errorf("build footer: %w", err)
	}
	if len(recs) > 0 {
		mem := memory.NewGoAllocator()
		cols := make([]arrow.Array, len(s.Fields()))
		for i, f := range s.Fields() {
			b := array.NewBuilder(mem, f.Type)
			cols[i] = b.NewArray()
			b.Release()
		}
		rec := array.NewRecordBatch(s, cols, 0)
		for range recs {
			if err := fw.Write(rec); err != nil {
				return nil, fmt.Errorf("build footer: %w", err)
			}
		}
		rec.Release()
		for _, c := range cols {
			c.Release()
		}
	}
	if err := fw.Close(); err != nil {
		return nil, fmt.Errorf("build footer: %w", err)
	}
	d := buf.Bytes()
	flen := int(binary.LittleEndian.Uint32(d[len(d)-10:]))
	footer := bytes.Clone(d[len(d)-10-flen : len(d)-10])
	err = func() (err error) {
		defer catch(&err, "build footer")
		ft := fbRoot(footer)
		patch := func(field int, blocks []block) error {
			start, n := ft.vector(field, 24)
			if n != len(blocks) {
				return fmt.Errorf("build footer: scratch file has %d blocks in field %d, want %d", n, field, len(blocks))
			}
			for j, b := range blocks {
				o := start + 24*j
				binary.LittleEndian.PutUint64(footer[o:], uint64(b.off))
				binary.LittleEndian.PutUint32(footer[o+8:], uint32(b.metaLen))
				binary.LittleEndian.PutUint32(footer[o+12:], 0)
				binary.LittleEndian.PutUint64(footer[o+16:], uint64(b.bodyLen))
			}
			return nil
		}
		if err := patch(2, dicts); err != nil {
			return err
		}
		return patch(3, recs)
	}()
	if err != nil {
		return nil, err
	}
	return footer, nil
}

var dictIDCache sync.Map // *arrow.Schema -> map[string]int64

// dictIDs returns the dictionary id of each dictionary-encoded column of s
// as arrow-go numbers them in the schema message.
func dictIDs(s *arrow.Schema) map[string]int64 {
	if m, ok := dictIDCache.Load(s); ok {
		return m.(map[string]int64)
	}
	sm, err := schemaMessage(s)
	if err != nil {
		panic(err) // the package's own schemas always encode
	}
	m, err := readMessage(sm, 0)
	if err != nil {
		panic(err)
	}
	fields, _ := parseSchema(m.hdr)
	ids := map[string]int64{}
	for _, f := range fields {
		if f.typ.dict {
			ids[f.name] = f.typ.dictID
		}
	}
	dictIDCache.Store(s, ids)
	return ids
}
