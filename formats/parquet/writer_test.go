package parquet

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

var (
	dict32 = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	dict8  = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
)

// testSchema has a column of every type the writer takes.
func testSchema() *arrow.Schema {
	md := arrow.NewMetadata([]string{"predictio.table"}, []string{"test"})
	return arrow.NewSchema([]arrow.Field{
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32},
		{Name: "u16", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "u8", Type: arrow.PrimitiveTypes.Uint8},
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8},
		{Name: "s", Type: arrow.BinaryTypes.String},
		{Name: "d32", Type: dict32},
		{Name: "d8", Type: dict8},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Uint64)},
	}, &md)
}

// row is one row of testSchema.
type row struct {
	u64      uint64
	i64      int64
	u32      uint32
	i32      int32
	u16      uint16
	u8       uint8
	i8       int8
	s, d, d8 string
	l        []uint64
}

// genRows makes n rows: steady, random and extreme integers (deltas that
// wrap), empty and long strings and lists.
func genRows(r *rand.Rand, n, base int) []row {
	rows := make([]row, n)
	for i := range rows {
		k := base + i
		x := &rows[i]
		switch k % 5 {
		case 0:
			x.u64, x.i64, x.u32, x.i32 = uint64(k)*4096, int64(k), uint32(k), int32(k)
		case 1:
			x.u64, x.i64, x.u32, x.i32 = math.MaxUint64, math.MinInt64, math.MaxUint32, math.MinInt32
		case 2:
			x.u64, x.i64, x.u32, x.i32 = 0, math.MaxInt64, 0, math.MaxInt32
		default:
			x.u64, x.i64, x.u32, x.i32 = r.Uint64(), int64(r.Uint64()), r.Uint32(), int32(r.Uint32())
		}
		x.u16, x.u8, x.i8 = uint16(r.Uint32()), uint8(k%7), int8(-k%3)
		x.s = strings.Repeat(fmt.Sprint(k%10), k%13)
		x.d = fmt.Sprintf("comm-%d", (k/50)%9) // long runs, new words in later batches
		x.d8 = []string{"read", "fault", "map"}[r.IntN(3)]
		for range k % 4 {
			x.l = append(x.l, r.Uint64()>>r.IntN(64))
		}
	}
	return rows
}

// batch builds a record of rows; each batch's dictionaries hold only the
// words it uses, in its own order.
func batch(t *testing.T, sc *arrow.Schema, rows []row) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, x := range rows {
		b.Field(0).(*array.Uint64Builder).Append(x.u64)
		b.Field(1).(*array.Int64Builder).Append(x.i64)
		b.Field(2).(*array.Uint32Builder).Append(x.u32)
		b.Field(3).(*array.Int32Builder).Append(x.i32)
		b.Field(4).(*array.Uint16Builder).Append(x.u16)
		b.Field(5).(*array.Uint8Builder).Append(x.u8)
		b.Field(6).(*array.Int8Builder).Append(x.i8)
		b.Field(7).(*array.StringBuilder).Append(x.s)
		if err := b.Field(8).(*array.BinaryDictionaryBuilder).AppendString(x.d); err != nil {
			t.Fatal(err)
		}
		if err := b.Field(9).(*array.BinaryDictionaryBuilder).AppendString(x.d8); err != nil {
			t.Fatal(err)
		}
		lb := b.Field(10).(*array.ListBuilder)
		lb.Append(true)
		for _, v := range x.l {
			lb.ValueBuilder().(*array.Uint64Builder).Append(v)
		}
	}
	return b.NewRecordBatch()
}

// readBack reads a Parquet file with arrow-go's reader, as rows.
func readBack(t *testing.T, data []byte) (*arrow.Schema, []row, *file.Reader) {
	t.Helper()
	pr, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("open the file: %v", err)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("read the table: %v", err)
	}
	defer tbl.Release()
	tr := array.NewTableReader(tbl, 1000)
	defer tr.Release()
	var out []row
	for tr.Next() {
		rec := tr.RecordBatch()
		str := func(c, i int) string { return rec.Column(c).ValueStr(i) }
		for i := range int(rec.NumRows()) {
			x := row{
				u64: rec.Column(0).(*array.Uint64).Value(i),
				i64: rec.Column(1).(*array.Int64).Value(i),
				u32: rec.Column(2).(*array.Uint32).Value(i),
				i32: rec.Column(3).(*array.Int32).Value(i),
				u16: rec.Column(4).(*array.Uint16).Value(i),
				u8:  rec.Column(5).(*array.Uint8).Value(i),
				i8:  rec.Column(6).(*array.Int8).Value(i),
				s:   str(7, i), d: str(8, i), d8: str(9, i),
			}
			l := rec.Column(10).(*array.List)
			s, e := l.ValueOffsets(i)
			for j := s; j < e; j++ {
				x.l = append(x.l, l.ListValues().(*array.Uint64).Value(int(j)))
			}
			out = append(out, x)
		}
	}
	sc, err := fr.Schema()
	if err != nil {
		t.Fatal(err)
	}
	return sc, out, pr
}

// TestRoundTrip writes batches across several pages and row groups and
// reads them back with arrow-go's Parquet reader: every value, the
// types (from the stored Arrow schema), the schema metadata, the codec and
// the encodings.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sc := testSchema()
	for _, tc := range []struct {
		name        string
		batches     []int
		group, page int
	}{
		{"one page", []int{100}, 0, 0},
		{"pages and groups", []int{1000, 1, 333, 2500}, 1500, 128},
		{"odd pages", []int{777, 778}, 1000, 129},
		{"empty", nil, 0, 0},
		{"empty batch", []int{0, 5}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewWriter(&buf, sc, Options{RowGroupRows: tc.group, PageRows: tc.page, CreatedBy: "predictio test"})
			if err != nil {
				t.Fatal(err)
			}
			var want []row
			for _, n := range tc.batches {
				rows := genRows(r, n, len(want))
				want = append(want, rows...)
				rec := batch(t, sc, rows)
				if err := w.Write(rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			got, rows, pr := readBack(t, buf.Bytes())
			if len(rows) != len(want) {
				t.Fatalf("read %d rows, want %d", len(rows), len(want))
			}
			for i := range want {
				if fmt.Sprint(rows[i]) != fmt.Sprint(want[i]) {
					t.Fatalf("row %d: read %+v, want %+v", i, rows[i], want[i])
				}
			}
			for i, f := range sc.Fields() {
				gt := got.Field(i).Type
				if l, ok := gt.(*arrow.ListType); ok {
					gt = arrow.ListOf(l.Elem())
				}
				if !arrow.TypeEqual(gt, f.Type) {
					t.Errorf("column %s read as %s, want %s", f.Name, got.Field(i).Type, f.Type)
				}
			}
			if v, ok := got.Metadata().GetValue("predictio.table"); !ok || v != "test" {
				t.Errorf("schema metadata %v lacks predictio.table", got.Metadata())
			}
			checkChunks(t, pr, tc.group)
		})
	}
}

// checkChunks checks the codec and encodings of each column chunk, and
// that row groups hold at most group rows.
func checkChunks(t *testing.T, pr *file.Reader, group int) {
	t.Helper()
	md := pr.MetaData()
	if group > 0 && md.NumRows > int64(group) && md.NumRowGroups() < 2 {
		t.Errorf("%d rows in %d row groups of at most %d", md.NumRows, md.NumRowGroups(), group)
	}
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		if group > 0 && rg.NumRows() > int64(group) {
			t.Errorf("row group %d: %d rows, want at most %d", g, rg.NumRows(), group)
		}
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Compression().String() != "ZSTD" {
				t.Errorf("row group %d column %d: codec %v", g, c, cc.Compression())
			}
			name := cc.PathInSchema().String()
			encs := fmt.Sprint(cc.Encodings())
			want := map[string]string{"u64": "DELTA_BINARY_PACKED", "s": "PLAIN", "d32": "RLE_DICTIONARY", "u8": "RLE_DICTIONARY", "l.list.element": "PLAIN"}[name]
			if want != "" && !strings.Contains(encs, want) {
				t.Errorf("column %s: encodings %s, want %s", name, encs, want)
			}
		}
	}
}

// TestWriteErrors: nulls and unwritable types are refused with the
// column's name.
func TestWriteErrors(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Uint64, Nullable: true}}, nil)
	w, err := NewWriter(&bytes.Buffer{}, sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewUint64Builder(memory.DefaultAllocator)
	b.AppendValues([]uint64{1, 2}, nil)
	b.AppendNull()
	col := b.NewArray()
	rec := array.NewRecordBatch(sc, []arrow.Array{col}, 3)
	if err := w.Write(rec); err == nil || !strings.Contains(err.Error(), "column x: 1 null") {
		t.Errorf("a null: error %v, want one naming column x", err)
	}
	for _, f := range []arrow.Field{
		{Name: "f", Type: arrow.PrimitiveTypes.Float64},
		{Name: "lf", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "di", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.PrimitiveTypes.Int64}},
	} {
		if _, err := NewWriter(&bytes.Buffer{}, arrow.NewSchema([]arrow.Field{f}, nil), Options{}); err == nil || !strings.Contains(err.Error(), "column "+f.Name) {
			t.Errorf("%s: error %v, want one naming the column", f.Type, err)
		}
	}
}

// TestDelta checks the delta encoder on the edges of its blocks and on
// values whose deltas overflow, against arrow-go's decoder (through a
// file of one column).
func TestDelta(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 31, 32, 33, 127, 128, 129, 130, 255, 256, 257, 1000} {
		for _, typ := range []arrow.DataType{arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Uint32} {
			sc := arrow.NewSchema([]arrow.Field{{Name: "v", Type: typ}}, nil)
			var buf bytes.Buffer
			w, err := NewWriter(&buf, sc, Options{})
			if err != nil {
				t.Fatal(err)
			}
			vals := make([]uint64, n)
			for i := range vals {
				vals[i] = r.Uint64() >> r.IntN(64)
			}
			var col arrow.Array
			if typ.ID() == arrow.INT64 {
				b := array.NewInt64Builder(memory.DefaultAllocator)
				for _, v := range vals {
					b.Append(int64(v))
				}
				col = b.NewArray()
			} else {
				b := array.NewUint32Builder(memory.DefaultAllocator)
				for _, v := range vals {
					b.Append(uint32(v))
				}
				col = b.NewArray()
			}
			if err := w.Write(array.NewRecordBatch(sc, []arrow.Array{col}, int64(n))); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			pr, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			fr, _ := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
			tbl, err := fr.ReadTable(context.Background())
			if err != nil {
				t.Fatalf("%s, %d values: %v", typ, n, err)
			}
			got := tbl.Column(0).Data().Chunk(0)
			for i := range n {
				if got.ValueStr(i) != col.ValueStr(i) {
					t.Fatalf("%s, %d values: value %d read as %s, want %s", typ, n, i, got.ValueStr(i), col.ValueStr(i))
				}
			}
			tbl.Release()
		}
	}
}
