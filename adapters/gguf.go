package adapters

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sort"
)

// The GGUF adapter reads GGUF v2 and v3 files (ggml's docs/gguf.md and
// ggml/src/gguf.cpp): magic "GGUF", version, tensor count and KV count
// (uint64), the KV metadata, the tensor infos (name, dimensions, ggml type,
// offset in the data section) and the data section, which starts at the
// next multiple of general.alignment (default 32) after the tensor infos.
// It parses the metadata incrementally as the program reads it, then
// announces tensors as TensorLayout events in load order, paced by the
// tensor being read.

const (
	ggufMaxTensors   = 1 << 16
	ggufMaxName      = 64 // GGML_MAX_NAME: names are shorter
	ggufMaxDims      = 4  // GGML_MAX_DIMS
	ggufKeyMax       = 64 // keys longer than this are skipped unread
	ggufDefaultAlign = 32
	ggufWindow       = 4096
)

// GGUF metadata value types.
const (
	ggufU8 uint32 = iota
	ggufI8
	ggufU16
	ggufI16
	ggufU32
	ggufI32
	ggufF32
	ggufBool
	ggufString
	ggufArray
	ggufU64
	ggufI64
	ggufF64
)

var ggufScalarSize = [...]uint64{1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}

// ggmlTypes gives block size and block bytes per ggml_type, as ggml's
// type_traits define them (0: removed or unknown).
var ggmlTypes = [...]struct{ blck, size uint64 }{
	0: {1, 4}, 1: {1, 2}, 2: {32, 18}, 3: {32, 20}, 6: {32, 22}, 7: {32, 24}, 8: {32, 34}, 9: {32, 36},
	10: {256, 84}, 11: {256, 110}, 12: {256, 144}, 13: {256, 176}, 14: {256, 210}, 15: {256, 292},
	16: {256, 66}, 17: {256, 74}, 18: {256, 98}, 19: {256, 50}, 20: {32, 18}, 21: {256, 110}, 22: {256, 82},
	23: {256, 136}, 24: {1, 1}, 25: {1, 2}, 26: {1, 4}, 27: {1, 8}, 28: {1, 8}, 29: {256, 56}, 30: {1, 2},
	34: {256, 54}, 35: {256, 66}, 39: {32, 17}, 40: {64, 36}, 41: {128, 18}, 42: {64, 18},
}

type ggufStage uint8

const (
	ggKey ggufStage = iota
	ggType
	ggValue
	ggStrings // elements of a string array
	ggTensor
	ggDone
	ggFailed
)

type ggufKey uint8

const (
	keyOther ggufKey = iota
	keyAlignment
	keyArch
	keyBlocks
)

type ggufTensor struct {
	name      string
	typ       uint32
	ne        [ggufMaxDims]uint64
	off, size uint64 // offset in the data section, bytes
}

type ggufFile struct {
	bo      binary.ByteOrder
	version uint32
	nT, nKV uint64
	size    uint64

	// parse state
	stage   ggufStage
	off     uint64
	i       uint64
	vtype   uint32
	strings uint64
	key     ggufKey
	align   uint64
	arch    string
	blocks  uint64
	tensors []ggufTensor
	dataOff uint64
	err     string
	prefix  uint64 // bytes [0, prefix) the program has read
	jumped  bool   // the program read beyond the metadata before it was parsed
	win     []byte
	winOff  uint64
	winLen  int

	// announcement
	order   string
	repack  string
	ahead   uint64
	load    []int32  // tensor indices in load order
	cum     []uint64 // cum[k]: bytes of load[:k]
	byOff   []int32  // tensor indices by offset
	rank    []int32  // rank of each tensor in load
	next    int      // next rank to announce
	cur     int      // last rank of the all-touched prefix of load
	touched []bool   // tensors some access overlapped
}

func newGGUF(hdr []byte, size uint64, cfg *Config) (parser, error) {
	if len(hdr) < 24 || string(hdr[:4]) != "GGUF" {
		return nil, nil
	}
	var bo binary.ByteOrder = binary.LittleEndian
	v := bo.Uint32(hdr[4:])
	if v&0xffff == 0 && v != 0 { // written on a host of the other byte order
		bo = binary.BigEndian
		v = bo.Uint32(hdr[4:])
	}
	if v == 1 {
		return nil, fmt.Errorf("gguf: header field version is 1; GGUF v1 is not supported (v2 and v3 are)")
	}
	if v < 2 || v > 3 {
		return nil, fmt.Errorf("gguf: header field version is %d; only v2 and v3 are supported", v)
	}
	g := &ggufFile{bo: bo, version: v, size: size, off: 24, align: ggufDefaultAlign,
		win: make([]byte, ggufWindow), order: cfg.TensorOrder, repack: cfg.TensorRepack, ahead: cfg.TensorAhead, cur: -1}
	g.nT, g.nKV = bo.Uint64(hdr[8:]), bo.Uint64(hdr[16:])
	if g.nT > ggufMaxTensors {
		return nil, fmt.Errorf("gguf: header field tensor count is %d, more than the %d supported", g.nT, ggufMaxTensors)
	}
	return g, nil
}

func (g *ggufFile) status() string {
	switch g.stage {
	case ggDone:
		return fmt.Sprintf("GGUF v%d, architecture %q, %d tensors, alignment %d, data at byte %d, %d announced, order %s (repack %s)",
			g.version, g.arch, len(g.tensors), g.align, g.dataOff, g.next, g.order, g.repack)
	case ggFailed:
		return fmt.Sprintf("GGUF v%d: %s", g.version, g.err)
	}
	return fmt.Sprintf("GGUF v%d, metadata parsed up to byte %d", g.version, g.off)
}

func (g *ggufFile) handle(a *access, r *reader, o *output) {
	start, end := a.first*r.ps, (a.first+a.n)*r.ps
	if start <= g.prefix {
		g.prefix = max(g.prefix, end)
	} else if g.stage < ggDone {
		g.jumped = true
	}
	r.eLo, r.eHi = 0, g.prefix/r.ps
	if g.stage < ggDone {
		g.parse(r)
		switch g.stage {
		case ggFailed:
			r.st.Malformed++
			o.warnf("%s", g.err)
			return
		case ggDone:
		default:
			return
		}
	}
	if g.stage != ggDone {
		return
	}
	if end > g.dataOff {
		g.advance(max(start, g.dataOff)-g.dataOff, end-g.dataOff)
	}
	g.announce(o)
}

// maxOverlap bounds the tensors one access is compared with.
const maxOverlap = 64

// advance records that data bytes [lo, hi) were read. Every tensor they
// overlap is touched, and the load position is the longest prefix of the
// load order that is all touched: the loader reads tensors in that order,
// and a page holding the end of one tensor and the start of another does
// not make the position jump.
func (g *ggufFile) advance(lo, hi uint64) {
	k := sort.Search(len(g.byOff), func(i int) bool {
		t := &g.tensors[g.byOff[i]]
		return t.off+max(t.size, 1) > lo
	})
	for n := 0; k < len(g.byOff) && n < maxOverlap; k, n = k+1, n+1 {
		i := g.byOff[k]
		if g.tensors[i].off >= hi {
			break
		}
		g.touched[i] = true
	}
	for g.cur+1 < len(g.load) && g.touched[g.load[g.cur+1]] {
		g.cur++
	}
}

// announce emits tensors in load order up to the one after the position,
// and beyond it while they are within TensorAhead bytes of it.
func (g *ggufFile) announce(o *output) {
	for g.next < len(g.load) {
		if g.next > g.cur+1 && g.cum[g.next]-g.cum[g.cur+1] >= g.ahead {
			return
		}
		t := &g.tensors[g.load[g.next]]
		o.tensor(t.name, g.dataOff+t.off, t.size)
		g.next++
	}
}

func (g *ggufFile) fail(format string, args ...any) bool {
	g.stage = ggFailed
	g.err = fmt.Sprintf("gguf: "+format, args...)
	g.tensors, g.load, g.cum, g.byOff, g.rank, g.touched = nil, nil, nil, nil, nil, nil
	return false
}

// limit is the end of what the parser may read: what the program has
// read, or the whole file once the program has moved past the metadata.
func (g *ggufFile) limit() uint64 {
	if g.jumped {
		return g.size
	}
	return min(g.prefix, g.size)
}

// bytes returns the n bytes at the parse offset, or ok false: with the
// stage set to failed when the file ends first, else because the program
// has not read them yet.
func (g *ggufFile) bytes(r *reader, n uint64) ([]byte, bool) {
	if g.off > g.size || n > g.size-g.off {
		return nil, g.fail("metadata field at byte %d runs past the end of the file (%d bytes)", g.off, g.size)
	}
	lim := g.limit()
	if g.off > lim || n > lim-g.off {
		return nil, false
	}
	if g.off >= g.winOff && g.off+n <= g.winOff+uint64(g.winLen) {
		d := g.off - g.winOff
		return g.win[d : d+n], true
	}
	l := min(uint64(len(g.win)), lim-g.off)
	if err := r.readAt(g.win[:l], g.off); err != nil {
		g.winLen = 0
		return nil, false
	}
	g.winOff, g.winLen = g.off, int(l)
	return g.win[:n], true
}

// parse advances through the metadata as far as the program has read.
func (g *ggufFile) parse(r *reader) {
	for g.stage < ggDone && g.step(r) {
	}
}

// step parses one item; false means stalled or failed.
func (g *ggufFile) step(r *reader) bool {
	switch g.stage {
	case ggKey:
		return g.stepKey(r)
	case ggType:
		return g.stepType(r)
	case ggValue:
		return g.stepValue(r)
	case ggStrings:
		return g.stepString(r)
	case ggTensor:
		return g.stepTensor(r)
	}
	return false
}

func (g *ggufFile) stepKey(r *reader) bool {
	if g.i == g.nKV {
		g.stage, g.i = ggTensor, 0
		return true
	}
	b, ok := g.bytes(r, 8)
	if !ok {
		return false
	}
	l := g.bo.Uint64(b)
	if l > g.size {
		return g.fail("key %d at byte %d has length %d, beyond the file", g.i, g.off, l)
	}
	g.key = keyOther
	if l <= ggufKeyMax {
		b, ok := g.bytes(r, 8+l)
		if !ok {
			return false
		}
		g.key = g.keyOf(b[8:])
	}
	g.off += 8 + l
	g.stage = ggType
	return true
}

func (g *ggufFile) keyOf(k []byte) ggufKey {
	switch {
	case string(k) == "general.alignment":
		return keyAlignment
	case string(k) == "general.architecture":
		return keyArch
	case g.arch != "" && len(k) == len(g.arch)+len(".block_count") && string(k[:len(g.arch)]) == g.arch && string(k[len(g.arch):]) == ".block_count":
		return keyBlocks
	}
	return keyOther
}

func (g *ggufFile) stepType(r *reader) bool {
	b, ok := g.bytes(r, 4)
	if !ok {
		return false
	}
	t := g.bo.Uint32(b)
	if t != ggufArray {
		if t >= uint32(len(ggufScalarSize)) {
			return g.fail("key %d at byte %d has value type %d, not a GGUF type", g.i, g.off, t)
		}
		g.vtype = t
		g.off += 4
		g.stage = ggValue
		return true
	}
	// An array: its type, element type and element count.
	b, ok = g.bytes(r, 4+4+8)
	if !ok {
		return false
	}
	et, n := g.bo.Uint32(b[4:]), g.bo.Uint64(b[8:])
	if g.key == keyAlignment {
		return g.fail("general.alignment at byte %d is an array, not a uint32", g.off)
	}
	g.off += 16
	rest := g.size - min(g.off, g.size)
	switch {
	case et == ggufString:
		if n > rest/8 {
			return g.fail("string array of key %d at byte %d claims %d elements, more than the file holds", g.i, g.off, n)
		}
		g.strings = n
		g.stage = ggStrings
		return true
	case et >= uint32(len(ggufScalarSize)) || ggufScalarSize[et] == 0:
		return g.fail("array of key %d at byte %d has element type %d (nested arrays are not supported)", g.i, g.off, et)
	}
	sz := ggufScalarSize[et]
	if n > rest/sz {
		return g.fail("array of key %d at byte %d claims %d elements, more than the file holds", g.i, g.off, n)
	}
	g.off += n * sz
	g.i++
	g.stage = ggKey
	return true
}

func (g *ggufFile) stepValue(r *reader) bool {
	if g.vtype == ggufString {
		b, ok := g.bytes(r, 8)
		if !ok {
			return false
		}
		l := g.bo.Uint64(b)
		if l > g.size-g.off-8 {
			return g.fail("string of key %d at byte %d has length %d, beyond the file", g.i, g.off, l)
		}
		if g.key == keyArch && l <= ggufKeyMax {
			b, ok := g.bytes(r, 8+l)
			if !ok {
				return false
			}
			g.arch = string(b[8:])
		}
		if g.key == keyAlignment {
			return g.fail("general.alignment at byte %d is a string, not a uint32", g.off)
		}
		g.off += 8 + l
	} else {
		sz := ggufScalarSize[g.vtype]
		b, ok := g.bytes(r, sz)
		if !ok {
			return false
		}
		switch g.key {
		case keyAlignment:
			if g.vtype != ggufU32 {
				return g.fail("general.alignment at byte %d has type %d, not uint32 (4)", g.off, g.vtype)
			}
			a := uint64(g.bo.Uint32(b))
			if a == 0 || a&(a-1) != 0 {
				return g.fail("general.alignment is %d, not a power of two", a)
			}
			g.align = a
		case keyBlocks:
			switch g.vtype {
			case ggufU32:
				g.blocks = uint64(g.bo.Uint32(b))
			case ggufU64:
				g.blocks = g.bo.Uint64(b)
			}
		}
		g.off += sz
	}
	g.i++
	g.stage = ggKey
	return true
}

func (g *ggufFile) stepString(r *reader) bool {
	if g.strings == 0 {
		g.i++
		g.stage = ggKey
		return true
	}
	b, ok := g.bytes(r, 8)
	if !ok {
		return false
	}
	l := g.bo.Uint64(b)
	if l > g.size-g.off-8 {
		return g.fail("array string at byte %d has length %d, beyond the file", g.off, l)
	}
	g.off += 8 + l
	g.strings--
	return true
}

func (g *ggufFile) stepTensor(r *reader) bool {
	if g.i == g.nT {
		return g.finish()
	}
	b, ok := g.bytes(r, 8)
	if !ok {
		return false
	}
	l := g.bo.Uint64(b)
	if l >= ggufMaxName {
		return g.fail("tensor %d at byte %d has a name of %d bytes; names are shorter than %d", g.i, g.off, l, ggufMaxName)
	}
	b, ok = g.bytes(r, 8+l+4)
	if !ok {
		return false
	}
	nd := uint64(g.bo.Uint32(b[8+l:]))
	if nd > ggufMaxDims {
		return g.fail("tensor %d at byte %d has %d dimensions; at most %d are supported", g.i, g.off, nd, ggufMaxDims)
	}
	n := 8 + l + 4 + 8*nd + 4 + 8
	if b, ok = g.bytes(r, n); !ok {
		return false
	}
	t := ggufTensor{name: string(b[8 : 8+l]), ne: [ggufMaxDims]uint64{1, 1, 1, 1}}
	p := 8 + l + 4
	for d := range nd {
		t.ne[d] = g.bo.Uint64(b[p+8*d:])
	}
	p += 8 * nd
	t.typ, t.off = g.bo.Uint32(b[p:]), g.bo.Uint64(b[p+4:])
	size, err := ggmlBytes(t.typ, t.ne)
	if err != "" {
		return g.fail("tensor %q at byte %d: %s", t.name, g.off, err)
	}
	t.size = size
	if g.tensors == nil {
		g.tensors = make([]ggufTensor, 0, min(g.nT, 1024))
	}
	g.tensors = append(g.tensors, t)
	g.off += n
	g.i++
	return true
}

// ggmlBytes returns the bytes of a tensor of ggml type typ and shape ne
// (ggml_nbytes for contiguous tensors), or a reason it has none.
func ggmlBytes(typ uint32, ne [ggufMaxDims]uint64) (uint64, string) {
	if typ >= uint32(len(ggmlTypes)) || ggmlTypes[typ].blck == 0 {
		return 0, fmt.Sprintf("type %d is not a ggml type", typ)
	}
	tt := ggmlTypes[typ]
	n := uint64(1)
	for _, d := range ne {
		if d > 1<<62 {
			return 0, fmt.Sprintf("dimension %d is negative or too large", int64(d))
		}
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > 1<<62 {
			return 0, "element count overflows"
		}
		n = lo
	}
	if ne[0]%tt.blck != 0 {
		return 0, fmt.Sprintf("first dimension %d is not a multiple of the type's block size %d", ne[0], tt.blck)
	}
	hi, lo := bits.Mul64(n/tt.blck, tt.size)
	if hi != 0 || lo > 1<<62 {
		return 0, "byte size overflows"
	}
	return lo, ""
}

// finish computes the data section's offset and the load order.
func (g *ggufFile) finish() bool {
	g.dataOff = (g.off + g.align - 1) / g.align * g.align
	for i := range g.tensors {
		t := &g.tensors[i]
		if t.off > 1<<62 || t.size > 1<<62-g.dataOff-t.off {
			return g.fail("tensor %q has offset %d, beyond any file", t.name, t.off)
		}
	}
	n := len(g.tensors)
	g.byOff = make([]int32, n)
	for i := range g.byOff {
		g.byOff[i] = int32(i)
	}
	sort.SliceStable(g.byOff, func(a, b int) bool { return g.tensors[g.byOff[a]].off < g.tensors[g.byOff[b]].off })
	if g.order == OrderFile {
		g.load = append([]int32(nil), g.byOff...)
	} else {
		g.load = llamaOrder(g.tensors, g.byOff, g.repack)
	}
	g.rank = make([]int32, n)
	g.touched = make([]bool, n)
	g.cum = make([]uint64, n+1)
	for k, i := range g.load {
		g.rank[i] = int32(k)
		g.cum[k+1] = g.cum[k] + g.tensors[i].size
	}
	g.stage = ggDone
	g.win = nil
	return true
}
