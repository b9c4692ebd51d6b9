package trace

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/formats/parquet"
)

// ExportedTable is one Parquet file written by ExportParquet.
type ExportedTable struct {
	Table string `json:"table"` // table file name in the bundle, e.g. accesses.arrow
	Path  string `json:"path"`  // the Parquet file written
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// parquetRowGroupRows is the number of rows per Parquet row group.
const parquetRowGroupRows = 1 << 20

// ExportParquet writes each table of the bundle in dir as a zstd-compressed
// Parquet file (files.parquet, accesses.parquet, hints.parquet) into out,
// which is created if needed. Column names and types are those of the
// bundle; comm, source and kind_name stay dictionary-encoded. Accesses and
// hints always carry kind_name (the kind's name, so that a query can say
// kind_name = 'read'): a format 1.0 bundle's are derived from kind. A
// bundle without hints.arrow yields no hints.parquet. opts are passed to
// formats.Open (formats.NoVerify).
func ExportParquet(dir, out string, opts ...formats.OpenOption) ([]ExportedTable, error) {
	b, err := openBundle(dir, opts)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("export: create %s: %w", out, err)
	}
	var res []ExportedTable
	for _, name := range []string{formats.FilesFile, formats.AccessesFile, formats.HintsFile} {
		if name == formats.HintsFile && !hasTable(dir, name) {
			continue
		}
		dst := filepath.Join(out, strings.TrimSuffix(name, ".arrow")+".parquet")
		n, err := exportTable(b, name, dst)
		if err != nil {
			return res, fmt.Errorf("export %s to %s: %w", filepath.Join(dir, name), dst, err)
		}
		st, err := os.Stat(dst)
		if err != nil {
			return res, err
		}
		res = append(res, ExportedTable{Table: name, Path: dst, Rows: n, Bytes: st.Size()})
	}
	return res, nil
}

func exportTable(b *formats.Bundle, name, dst string) (rows int64, err error) {
	t, err := b.OpenTable(name)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	tmp := dst + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	conv := newExportSchema(name, t.Schema())
	fw, err := parquet.NewWriter(f, conv.schema, parquet.Options{RowGroupRows: parquetRowGroupRows, CreatedBy: "predictio"})
	if err != nil {
		return 0, err
	}
	for i := 0; i < t.NumBatches(); i++ {
		rec, err := t.Batch(i)
		if err != nil {
			return rows, err // formats names the file and the batch
		}
		if rec, err = conv.convert(rec); err != nil {
			return rows, fmt.Errorf("batch %d: %w", i, err)
		}
		err = fw.Write(rec)
		rows += rec.NumRows()
		rec.Release()
		if err != nil {
			return rows, fmt.Errorf("batch %d: %w", i, err)
		}
	}
	if err := fw.Close(); err != nil {
		return rows, err
	}
	if err := f.Close(); err != nil {
		return rows, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return rows, err
	}
	return rows, nil
}

// exportSchema is the schema of an exported table: the bundle's, without
// the table file's CRC (it protects the Arrow file, not the export), and
// with a kind_name column derived from kind when the bundle has none.
type exportSchema struct {
	schema   *arrow.Schema
	kindCol  int           // column of kind, when kind_name is derived
	kindDict *array.String // kind_name dictionary values
	dictType *arrow.DictionaryType
}

func newExportSchema(table string, s *arrow.Schema) *exportSchema {
	var keys, vals []string
	md := s.Metadata()
	for i, k := range md.Keys() {
		if k != formats.MetaCRC32C {
			keys, vals = append(keys, k), append(vals, md.Values()[i])
		}
	}
	meta := arrow.NewMetadata(keys, vals)
	fields := s.Fields()
	c := &exportSchema{kindCol: -1}
	kinds := map[string][]string{formats.AccessesFile: formats.AccessKindDictionary(), formats.HintsFile: formats.HintKindDictionary()}[table]
	if k := s.FieldIndices("kind"); kinds != nil && len(k) == 1 && !s.HasField("kind_name") && s.Field(k[0]).Type.ID() == arrow.UINT8 {
		c.kindCol = k[0]
		c.dictType = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
		b := array.NewStringBuilder(memory.DefaultAllocator)
		b.AppendValues(kinds, nil)
		c.kindDict = b.NewStringArray()
		b.Release()
		fields = append(fields, arrow.Field{Name: "kind_name", Type: c.dictType})
	}
	c.schema = arrow.NewSchema(fields, &meta)
	return c
}

// convert returns rec with the export schema; it releases rec.
func (c *exportSchema) convert(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	defer rec.Release()
	cols := rec.Columns()
	if c.kindCol >= 0 {
		kinds := rec.Column(c.kindCol).(*array.Uint8)
		ib := array.NewInt8Builder(memory.DefaultAllocator)
		defer ib.Release()
		for i := 0; i < kinds.Len(); i++ {
			k := kinds.Value(i)
			if int(k) >= c.kindDict.Len() || c.kindDict.Value(int(k)) == formats.UndefinedKindName {
				k = 0
			}
			ib.Append(int8(k))
		}
		idx := ib.NewArray()
		defer idx.Release()
		names := array.NewDictionaryArray(c.dictType, idx, c.kindDict)
		defer names.Release()
		cols = append(append([]arrow.Array(nil), cols...), names)
	}
	return array.NewRecordBatch(c.schema, cols, rec.NumRows()), nil
}
