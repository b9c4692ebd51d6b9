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
