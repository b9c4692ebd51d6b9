package formats

import (
	"github.com/apache/arrow-go/v18/arrow"
)

// MetaFormatVersion is the schema metadata key holding FormatVersion in each
// table file.
const MetaFormatVersion = "predictio.format_version"

// MetaTable is the schema metadata key naming the table ("files",
// "accesses", "hints").
const MetaTable = "predictio.table"

// MetaCRC32C is the key of the CRC32C that protects a table file's schema
// message and footer (in the schema metadata), and each dictionary and record
// batch message (in the message's custom_metadata). docs/format.md
// describes what each covers.
const MetaCRC32C = "predictio.crc32c"

// crcPlaceholder is the value a CRC field holds while the CRC is computed.
const crcPlaceholder = "00000000"

func tableSchema(table string, fields []arrow.Field) *arrow.Schema {
	md := arrow.NewMetadata([]string{MetaFormatVersion, MetaTable, MetaCRC32C}, []string{FormatVersion, table, crcPlaceholder})
	return arrow.NewSchema(fields, &md)
}

var (
	i8dict  = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
	i32dict = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	u8      = arrow.PrimitiveTypes.Uint8
	u32     = arrow.PrimitiveTypes.Uint32
	u64     = arrow.PrimitiveTypes.Uint64
	i64     = arrow.PrimitiveTypes.Int64
)

// FilesSchema, AccessesSchema and HintsSchema are the Arrow schemas of the
// three tables, in column order (docs/format.md). Columns after the 1.0 ones
// were added in format 1.1.
var (
	FilesSchema = tableSchema("files", []arrow.Field{
		{Name: "file_id", Type: u32},
		{Name: "dev", Type: u64},
		{Name: "ino", Type: u64},
		{Name: "path", Type: arrow.BinaryTypes.String},
		{Name: "size_bytes", Type: u64},
		{Name: "mtime_ns", Type: i64},
		{Name: "mode", Type: u32},
	})
	AccessesSchema = tableSchema("accesses", []arrow.Field{
		{Name: "ts_ns", Type: u64},
		{Name: "pid", Type: u32},
		{Name: "tid", Type: u32},
		{Name: "comm", Type: i32dict},
		{Name: "file_id", Type: u32},
		{Name: "first_page", Type: u64},
		{Name: "npages", Type: u32},
		{Name: "kind", Type: u8},
		{Name: "end_ns", Type: u64},
		{Name: "op", Type: u64},
		{Name: "ret", Type: i64},
		{Name: "prot", Type: u8},
		{Name: "map_first_page", Type: u64},
		{Name: "map_pages", Type: u64},
		{Name: "kind_name", Type: i8dict},
		{Name: "tracer_ns", Type: u32},
		{Name: "tracer_calls", Type: u32},
	})
	HintsSchema = tableSchema("hints", []arrow.Field{
		{Name: "ts_ns", Type: u64},
		{Name: "pid", Type: u32},
		{Name: "kind", Type: u8},
		{Name: "file_id", Type: u32},
		{Name: "parent_page", Type: u64},
		{Name: "position", Type: u32},
		{Name: "children", Type: arrow.ListOf(u64)},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "offset_bytes", Type: u64},
		{Name: "length_bytes", Type: u64},
		{Name: "tid", Type: u32},
		{Name: "source", Type: i32dict},
		{Name: "kind_name", Type: i8dict},
	})
)

// schemaFor returns the schema of a table file name.
func schemaFor(name string) *arrow.Schema {
	switch name {
	case FilesFile:
		return FilesSchema
	case AccessesFile:
		return AccessesSchema
	case HintsFile:
		return HintsSchema
	}
	return nil
}

// wantType is the colType a reader requires for a column of an arrow type.
func wantType(t arrow.DataType) colType {
	switch t := t.(type) {
	case *arrow.Uint8Type:
		return colType{id: typeInt, bitWidth: 8}
	case *arrow.Uint32Type:
		return colType{id: typeInt, bitWidth: 32}
	case *arrow.Uint64Type:
		return colType{id: typeInt, bitWidth: 64}
	case *arrow.Int64Type:
		return colType{id: typeInt, bitWidth: 64, signed: true}
	case *arrow.StringType:
		return colType{id: typeUtf8}
	case *arrow.ListType:
		return colType{id: typeList, children: []colType{wantType(t.Elem())}}
	case *arrow.DictionaryType:
		v := wantType(t.ValueType)
		idx := wantType(t.IndexType)
		return colType{dict: true, id: typeInt, bitWidth: idx.bitWidth, signed: true, value: &v}
	case *arrow.Int8Type:
		return colType{id: typeInt, bitWidth: 8, signed: true}
	case *arrow.Int32Type:
		return colType{id: typeInt, bitWidth: 32, signed: true}
	}
	panic("formats: no colType for " + t.String())
}

// compatible reports whether a column of type got can be read as want.
// Dictionary index width and signedness may differ.
func compatible(got, want colType) bool {
	if got.dict != want.dict {
		return false
	}
	if got.dict {
		return got.value != nil && compatible(*got.value, *want.value)
	}
	if got.id != want.id {
		return false
	}
	switch got.id {
	case typeInt:
		return got.bitWidth == want.bitWidth && got.signed == want.signed
	case typeList:
		return len(got.children) == 1 && compatible(got.children[0], want.children[0])
	}
	return true
}
