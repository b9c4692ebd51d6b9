package trace

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/predictio/predictio/formats"
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
// bundle; comm stays dictionary-encoded. A bundle without hints.arrow
// yields no hints.parquet.
func ExportParquet(dir, out string) ([]ExportedTable, error) {
	b, err := openBundle(dir)
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
	props := parquet.NewWriterProperties(parquetProps(t.Schema())...)
	fw, err := pqarrow.NewFileWriter(t.Schema(), f, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return 0, err
	}
	for i := 0; i < t.NumBatches(); i++ {
		rec, err := t.Batch(i)
		if err != nil {
			fw.Close()
			return rows, err // formats names the file and the batch
		}
		if n, _ := fw.RowGroupNumRows(); n >= parquetRowGroupRows {
			fw.NewBufferedRowGroup()
		}
		err = fw.WriteBuffered(rec)
		rows += rec.NumRows()
		rec.Release()
		if err != nil {
			fw.Close()
			return rows, fmt.Errorf("write batch %d: %w", i, err)
		}
	}
	if err := fw.Close(); err != nil { // closes f too
		return rows, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return rows, err
	}
	return rows, nil
}

// parquetProps chooses zstd and, per column, the encoding that suits it:
// dictionary for strings and small enums, delta for the integer columns
// (timestamps and pages grow steadily, so deltas compress well).
func parquetProps(sc *arrow.Schema) []parquet.WriterProperty {
	props := []parquet.WriterProperty{
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithDictionaryDefault(false),
		parquet.WithCreatedBy("predictio"),
	}
	for _, f := range sc.Fields() {
		switch f.Type.ID() {
		case arrow.UINT64, arrow.INT64, arrow.UINT32, arrow.INT32:
			props = append(props, parquet.WithEncodingFor(f.Name, parquet.Encodings.DeltaBinaryPacked))
		case arrow.STRING, arrow.DICTIONARY, arrow.UINT8, arrow.INT8:
			props = append(props, parquet.WithDictionaryFor(f.Name, true))
		}
	}
	return props
}
