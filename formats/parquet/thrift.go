package parquet

import "encoding/binary"

// Thrift compact protocol types (the Parquet metadata's encoding).
const (
	ctTrue   = 1
	ctFalse  = 2
	ctByte   = 3
	ctI32    = 5
	ctI64    = 6
	ctBinary = 8
	ctList   = 9
	ctStruct = 12
)

// thrift writes Thrift compact protocol structs into b.
type thrift struct {
	b     []byte
	last  int16   // the previous field id in the current struct
	stack []int16 // the enclosing structs' last field ids
}

func (t *thrift) field(id int16, typ byte) {
	if d := id - t.last; d > 0 && d <= 15 {
		t.b = append(t.b, byte(d)<<4|typ)
	} else {
		t.b = append(t.b, typ)
		t.b = binary.AppendVarint(t.b, int64(id))
	}
	t.last = id
}

func (t *thrift) i32(id int16, v int32) {
	t.field(id, ctI32)
	t.b = binary.AppendVarint(t.b, int64(v))
}

func (t *thrift) i64(id int16, v int64) {
	t.field(id, ctI64)
	t.b = binary.AppendVarint(t.b, v)
}

func (t *thrift) i8(id int16, v int8) {
	t.field(id, ctByte)
	t.b = append(t.b, byte(v))
}

func (t *thrift) bool(id int16, v bool) {
	if v {
		t.field(id, ctTrue)
	} else {
		t.field(id, ctFalse)
	}
}

func (t *thrift) str(id int16, s string) {
	t.field(id, ctBinary)
	t.bin(s)
}

// bin writes a string's length and bytes (a list element or a field's
// value).
func (t *thrift) bin(s string) {
	t.b = binary.AppendUvarint(t.b, uint64(len(s)))
	t.b = append(t.b, s...)
}

// begin starts a struct: field id's (0 for a list element).
func (t *thrift) begin(id int16) {
	if id != 0 {
		t.field(id, ctStruct)
	}
	t.stack = append(t.stack, t.last)
	t.last = 0
}

// end ends the struct begun last.
func (t *thrift) end() {
	t.b = append(t.b, 0)
	t.last = t.stack[len(t.stack)-1]
	t.stack = t.stack[:len(t.stack)-1]
}

// list starts field id, a list of n elements of type typ.
func (t *thrift) list(id int16, typ byte, n int) {
	t.field(id, ctList)
	if n < 15 {
		t.b = append(t.b, byte(n)<<4|typ)
		return
	}
	t.b = append(t.b, 0xf0|typ)
	t.b = binary.AppendUvarint(t.b, uint64(n))
}

// element writes an i32 list element.
func (t *thrift) element(v int32) { t.b = binary.AppendVarint(t.b, int64(v)) }
