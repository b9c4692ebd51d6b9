package adapters

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// ggufBuilder writes GGUF files for tests, in either byte order.
type ggufBuilder struct {
	bo  binary.AppendByteOrder
	nkv uint64
	kvs []byte
}

func (b *ggufBuilder) u32(dst []byte, v uint32) []byte { return b.bo.AppendUint32(dst, v) }
func (b *ggufBuilder) u64(dst []byte, v uint64) []byte { return b.bo.AppendUint64(dst, v) }
func (b *ggufBuilder) str(dst []byte, s string) []byte {
	return append(b.u64(dst, uint64(len(s))), s...)
}

func (b *ggufBuilder) kvU32(key string, v uint32) {
	b.kvs = b.u32(b.u32(b.str(b.kvs, key), ggufU32), v)
	b.nkv++
}

func (b *ggufBuilder) kvStr(key, v string) {
	b.kvs = b.str(b.u32(b.str(b.kvs, key), ggufString), v)
	b.nkv++
}

func (b *ggufBuilder) kvStrings(key string, vs []string) {
	b.kvs = b.u64(b.u32(b.u32(b.str(b.kvs, key), ggufArray), ggufString), uint64(len(vs)))
	for _, v := range vs {
		b.kvs = b.str(b.kvs, v)
	}
	b.nkv++
}

type testTensor struct {
	name string
	ne   []uint64
	typ  uint32
}

// file returns the file: header, KVs, tensor infos with offsets packed at
// the alignment, padding, and, with withData, zeroed tensor data.
func (b *ggufBuilder) file(version uint32, ts []testTensor, align uint64, withData bool) []byte {
	out := append([]byte("GGUF"), b.u32(nil, version)...)
	out = b.u64(out, uint64(len(ts)))
	out = b.u64(out, b.nkv)
	out = append(out, b.kvs...)
	off := uint64(0)
	for _, t := range ts {
		out = b.str(out, t.name)
		out = b.u32(out, uint32(len(t.ne)))
		ne := [4]uint64{1, 1, 1, 1}
		for i, d := range t.ne {
			out = b.u64(out, d)
			if i < len(ne) {
				ne[i] = d
			}
		}
		out = b.u32(out, t.typ)
		out = b.u64(out, off)
		n, _ := ggmlBytes(t.typ, ne)
		off += (n + align - 1) / align * align
	}
	for uint64(len(out))%align != 0 {
		out = append(out, 0)
	}
	if withData {
		out = append(out, make([]byte, off)...)
	}
	return out
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// sequentialReads returns read accesses of every page of [0, n) bytes,
// one page each, as a buffered reader reads a header.
func sequentialReads(n uint64) []policies.Event {
	var evs []policies.Event
	for off := uint64(0); off < n; off += 4096 {
		evs = append(evs, accessOf(span{off, 4096}, formats.KindRead, uint64(len(evs)+1)))
	}
	return evs
}

func tensorEvents(out []derived) []derived {
	var ts []derived
	for _, d := range out {
		if d.ev.Kind == policies.EventTensorLayout {
			ts = append(ts, d)
		}
	}
	return ts
}

// recordedOrder returns, from a .llama-reads file, the data offsets of the
// reads that start a tensor, in order.
func recordedOrder(t *testing.T, name string, starts map[uint64]string) []string {
	t.Helper()
	var order []string
	for _, s := range readSpans(t, name) {
		if n, ok := starts[s.off]; ok && s.n > 0 {
			order = append(order, n)
		}
	}
	return order
}

// TestGGUFLlamaCPPOrder checks the announced order against llama.cpp's: the
// tensor reads node-llama-cpp 3.22.1 made loading the full model without
// mmap (an LD_PRELOAD log of its freads). Q8_0 loads in creation order;
// Q4_0 on an AVX2 CPU loads the tensors its CPU backend repacks first,
// biggest first.
func TestGGUFLlamaCPPOrder(t *testing.T) {
	for _, c := range []struct{ model, repack string }{
		{"small-q8", RepackAVX2},
		{"small-q4", RepackAVX2},
		{"small-q8", RepackNone},
	} {
		t.Run(c.model+"-"+c.repack, func(t *testing.T) {
			path := filepath.Join(testdata, "gguf", c.model+".gguf")
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			evs := sequentialReads(uint64(st.Size()))
			out, s := run(t, Config{TensorAhead: 1 << 62, TensorRepack: c.repack}, path, evs)
			ts := tensorEvents(out)
			starts := map[uint64]string{}
			var got []string
			for _, d := range ts {
				starts[d.ev.Tensor.Offset] = d.ev.Tensor.Name
				got = append(got, d.ev.Tensor.Name)
			}
			want := recordedOrder(t, "gguf/"+c.model+".llama-reads", starts)
			if len(ts) != 39 || len(want) != 39 {
				t.Fatalf("%d tensors announced, %d reads of tensors recorded; the model has 39", len(ts), len(want))
			}
			if !slices.Equal(got, want) {
				t.Errorf("announced %v\nllama.cpp read %v", got, want)
			}
			if s.Stats().PagesIO != 0 {
				t.Errorf("%d pages read beyond what the program read", s.Stats().PagesIO)
			}
		})
	}
}

// TestGGUFPacing replays llama.cpp's tensor reads with a small
// TensorAhead: every tensor must be announced before it is loaded, and the
// bytes announced and not yet loaded stay within TensorAhead plus three
// tensors.
func TestGGUFPacing(t *testing.T) {
	path := filepath.Join(testdata, "gguf", "small-q8.gguf")
	st, _ := os.Stat(path)
	evs := sequentialReads(uint64(st.Size()))
	reads := readSpans(t, "gguf/small-q8.llama-reads")
	for _, r := range reads {
		evs = append(evs, accessOf(r, formats.KindRead, uint64(len(evs)+1)))
	}
	const ahead = 1 << 20
	out, _ := run(t, Config{TensorAhead: ahead, TensorRepack: RepackAVX2}, path, evs)
	ts := tensorEvents(out)
	if len(ts) != 39 {
		t.Fatalf("%d tensors announced, want 39", len(ts))
	}
	announced := map[uint64]int{} // offset -> access index
	size := map[uint64]uint64{}
	var biggest uint64
	for _, d := range ts {
		announced[d.ev.Tensor.Offset] = d.at
		size[d.ev.Tensor.Offset] = d.ev.Tensor.Length
		biggest = max(biggest, d.ev.Tensor.Length)
	}
	// A tensor's load is the recorded read that starts at its offset (a
	// page may also hold the end of the tensor read before).
	loadAt := map[int]uint64{}
	hdr := len(evs) - len(reads)
	for k, r := range reads {
		if _, ok := announced[r.off]; ok {
			loadAt[hdr+k] = r.off
		}
	}
	read := map[uint64]bool{}
	k := 0
	for i := range evs {
		if o, ok := loadAt[i]; ok && !read[o] {
			read[o] = true
			if announced[o] >= i {
				t.Errorf("tensor at %d announced at access %d, loaded at %d", o, announced[o], i)
			}
		}
		// Bytes announced by now and not yet loaded.
		for k < len(ts) && ts[k].at <= i {
			k++
		}
		var pending uint64
		for _, d := range ts[:k] {
			if !read[d.ev.Tensor.Offset] {
				pending += size[d.ev.Tensor.Offset]
			}
		}
		// The position may run two tensors ahead of the loader (pages
		// shared with the next tensors mark them touched), and the tensor
		// after the position is always announced.
		if pending > ahead+3*biggest {
			t.Fatalf("at access %d, %d bytes announced and not loaded; TensorAhead is %d", i, pending, ahead)
		}
	}
	if len(read) != 39 {
		t.Errorf("%d announced tensors read", len(read))
	}
}

// TestGGUF8B checks the order and sizes of an 8B-like llama model's 291
// tensors.
func TestGGUF8B(t *testing.T) {
	path := filepath.Join(testdata, "gguf", "llama8b-q8.gguf")
	st, _ := os.Stat(path)
	out, s := run(t, Config{TensorAhead: 1 << 62}, path, sequentialReads(uint64(st.Size())))
	ts := tensorEvents(out)
	if len(ts) != 3+32*9 {
		t.Fatalf("%d tensors, want 291", len(ts))
	}
	var names []string
	for _, d := range ts[:12] {
		names = append(names, d.ev.Tensor.Name)
	}
	want := []string{"token_embd.weight", "output_norm.weight", "output.weight",
		"blk.0.attn_norm.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
		"blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_down.weight", "blk.0.ffn_up.weight"}
	if !slices.Equal(names, want) {
		t.Errorf("first tensors %v, want %v", names, want)
	}
	if last := ts[len(ts)-1].ev.Tensor.Name; last != "blk.31.ffn_up.weight" {
		t.Errorf("last tensor %s", last)
	}
	var total uint64
	for _, d := range ts {
		if d.ev.Tensor.Offset < uint64(st.Size()) || d.ev.Tensor.Offset%32 != 0 {
			t.Errorf("%s at %d: not in an aligned data section after the %d-byte header", d.ev.Tensor.Name, d.ev.Tensor.Offset, st.Size())
		}
		switch d.ev.Tensor.Name {
		case "blk.0.attn_q.weight":
			if d.ev.Tensor.Length != 4096*4096/32*34 {
				t.Errorf("attn_q: %d bytes", d.ev.Tensor.Length)
			}
		case "blk.0.ffn_down.weight":
			if d.ev.Tensor.Length != 14336*4096/32*34 {
				t.Errorf("ffn_down: %d bytes", d.ev.Tensor.Length)
			}
		case "output_norm.weight":
			if d.ev.Tensor.Length != 4096*4 {
				t.Errorf("output_norm: %d bytes", d.ev.Tensor.Length)
			}
		}
		total += d.ev.Tensor.Length
	}
	if total < 7.0e9 || total > 8.0e9 {
		t.Errorf("%d bytes of weights; an 8B-like Q8_0 model has about 7.4 GB", total)
	}
	if d := s.Status()[0].Detail; !strings.Contains(d, `architecture "llama"`) || !strings.Contains(d, "291 tensors") {
		t.Errorf("status %q", d)
	}
}

// TestGGUFIncremental checks that the metadata is parsed as the program
// reads it, never ahead of it: nothing is announced before the last header
// page is read, and no page beyond those read is touched.
func TestGGUFIncremental(t *testing.T) {
	path := filepath.Join(testdata, "gguf", "llama8b-q8.gguf")
	st, _ := os.Stat(path)
	evs := sequentialReads(uint64(st.Size()))
	out, s := run(t, Config{}, path, evs)
	if len(out) == 0 || out[0].at != len(evs)-1 {
		t.Fatalf("first announcement at access %v of %d", out[:min(len(out), 1)], len(evs))
	}
	if s.Stats().PagesIO != 0 || s.Stats().PagesHit == 0 {
		t.Errorf("stats %+v: every page read must be one the program read", s.Stats())
	}
	// With the first access elsewhere (the program skipped the
	// metadata), the adapter reads it itself, counted as I/O.
	jump := []policies.Event{accessOf(span{uint64(st.Size()) + 1<<20, 4096}, formats.KindRead, 1)}
	out, s = run(t, Config{}, path, jump)
	if len(tensorEvents(out)) == 0 || s.Stats().PagesIO == 0 {
		t.Errorf("a first access past the metadata: %d events, stats %+v", len(out), s.Stats())
	}
}

func smallModel(b *ggufBuilder) []testTensor {
	b.kvStr("general.architecture", "llama")
	b.kvU32("llama.block_count", 1)
	b.kvStrings("tokenizer.ggml.tokens", []string{"a", "bb", "ccc"})
	return []testTensor{
		{"blk.0.ffn_up.weight", []uint64{64, 8}, 8},
		{"output.weight", []uint64{64, 3}, 8},
		{"blk.0.attn_norm.weight", []uint64{64}, 0},
		{"token_embd.weight", []uint64{64, 3}, 8},
		{"mystery.weight", []uint64{32}, 1},
		{"blk.0.attn_q.weight", []uint64{64, 64}, 2},
	}
}

// TestGGUFVersionsAndByteOrder checks v2 and v3, little- and big-endian,
// alignment and the file order option, and that v1 and v4 are refused.
func TestGGUFVersionsAndByteOrder(t *testing.T) {
	wantLoad := []string{"token_embd.weight", "output.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "mystery.weight"}
	for _, c := range []struct {
		name    string
		bo      binary.AppendByteOrder
		version uint32
		align   uint32
		order   string
		want    []string
	}{
		{"v3", binary.LittleEndian, 3, 0, "", wantLoad},
		{"v2", binary.LittleEndian, 2, 0, "", wantLoad},
		{"v3-big-endian", binary.BigEndian, 3, 0, "", wantLoad},
		{"align-64", binary.LittleEndian, 3, 64, "", wantLoad},
		{"file-order", binary.LittleEndian, 3, 0, OrderFile, []string{"blk.0.ffn_up.weight", "output.weight", "blk.0.attn_norm.weight", "token_embd.weight", "mystery.weight", "blk.0.attn_q.weight"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &ggufBuilder{bo: c.bo}
			ts := smallModel(b)
			align := uint64(32)
			if c.align != 0 {
				b.kvU32("general.alignment", c.align)
				align = uint64(c.align)
			}
			data := b.file(c.version, ts, align, true)
			path := writeTemp(t, "m.gguf", data)
			out, s := run(t, Config{TensorAhead: 1 << 62, TensorOrder: c.order, TensorRepack: RepackNone}, path, sequentialReads(uint64(len(data))))
			var got []string
			for _, d := range tensorEvents(out) {
				got = append(got, d.ev.Tensor.Name)
				if d.ev.Tensor.Offset%align != 0 || d.ev.Tensor.Offset+d.ev.Tensor.Length > uint64(len(data)) {
					t.Errorf("%s at %d+%d: not aligned to %d within the file", d.ev.Tensor.Name, d.ev.Tensor.Offset, d.ev.Tensor.Length, align)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("order %v, want %v (status %+v)", got, c.want, s.Status())
			}
		})
	}
	for _, v := range []uint32{1, 4} {
		b := &ggufBuilder{bo: binary.LittleEndian}
		data := b.file(v, smallModel(b), 32, false)
		var warns []string
		out, s := run(t, Config{Warn: func(m string) { warns = append(warns, m) }}, writeTemp(t, "v.gguf", data), sequentialReads(uint64(len(data))))
		if len(out) != 0 || s.Stats().Recognized != 0 || len(warns) != 1 || !strings.Contains(warns[0], "version") {
			t.Errorf("version %d: %d events, stats %+v, warnings %q", v, len(out), s.Stats(), warns)
		}
	}
}

// TestGGUFMalformed checks that bad metadata fails the file with a
// warning naming the field, and nothing is announced.
func TestGGUFMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(b *ggufBuilder) []testTensor
		want string
	}{
		{"alignment-not-power", func(b *ggufBuilder) []testTensor {
			b.kvU32("general.alignment", 48)
			return smallModel(b)
		}, "general.alignment is 48"},
		{"alignment-string", func(b *ggufBuilder) []testTensor {
			b.kvStr("general.alignment", "32")
			return smallModel(b)
		}, "general.alignment"},
		{"long-name", func(b *ggufBuilder) []testTensor {
			return []testTensor{{strings.Repeat("x", 64), []uint64{32}, 0}}
		}, "name of 64 bytes"},
		{"five-dims", func(b *ggufBuilder) []testTensor {
			return []testTensor{{"t", []uint64{1, 1, 1, 1, 1}, 0}}
		}, "5 dimensions"},
		{"unknown-type", func(b *ggufBuilder) []testTensor {
			return []testTensor{{"t", []uint64{32}, 33}}
		}, "type 33"},
		{"block-mismatch", func(b *ggufBuilder) []testTensor {
			return []testTensor{{"t", []uint64{33}, 8}}
		}, "block size 32"},
		{"nested-array", func(b *ggufBuilder) []testTensor {
			b.kvs = b.u64(b.u32(b.u32(b.str(b.kvs, "k"), ggufArray), ggufArray), 1)
			b.nkv++
			return nil
		}, "nested arrays"},
		{"huge-array", func(b *ggufBuilder) []testTensor {
			b.kvs = b.u64(b.u32(b.u32(b.str(b.kvs, "k"), ggufArray), ggufU64), 1<<60)
			b.nkv++
			return nil
		}, "more than the file holds"},
		{"huge-string", func(b *ggufBuilder) []testTensor {
			b.kvs = b.u64(b.u32(b.str(b.kvs, "k"), ggufString), 1<<50)
			b.nkv++
			return nil
		}, "length"},
		{"value-type", func(b *ggufBuilder) []testTensor {
			b.kvs = b.u32(b.str(b.kvs, "k"), 77)
			b.nkv++
			return nil
		}, "value type 77"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &ggufBuilder{bo: binary.LittleEndian}
			ts := c.edit(b)
			data := b.file(3, ts, 32, true)
			var warns []string
			out, s := run(t, Config{Warn: func(m string) { warns = append(warns, m) }}, writeTemp(t, "m.gguf", data), sequentialReads(uint64(len(data))+8192))
			if len(out) != 0 {
				t.Errorf("%d events from a malformed file", len(out))
			}
			if len(warns) != 1 || !strings.Contains(warns[0], c.want) {
				t.Errorf("warnings %q, want one naming %q", warns, c.want)
			}
			if len(s.Status()) != 1 || !strings.Contains(s.Status()[0].Detail, c.want) {
				t.Errorf("status %+v", s.Status())
			}
		})
	}
	// A tensor count beyond the bound is refused before anything is
	// allocated.
	b := &ggufBuilder{bo: binary.LittleEndian}
	data := b.file(3, nil, 32, false)
	binary.LittleEndian.PutUint64(data[8:], ggufMaxTensors+1)
	if _, err := newGGUF(data, uint64(len(data)), &Config{}); err == nil || !strings.Contains(err.Error(), "tensor count") {
		t.Errorf("tensor count %d: %v", ggufMaxTensors+1, err)
	}
}

func TestGGMLBytes(t *testing.T) {
	for _, c := range []struct {
		typ  uint32
		ne   [4]uint64
		want uint64
	}{
		{0, [4]uint64{10, 1, 1, 1}, 40},
		{1, [4]uint64{10, 3, 1, 1}, 60},
		{2, [4]uint64{4096, 4096, 1, 1}, 4096 * 4096 / 32 * 18},
		{8, [4]uint64{64, 2, 3, 1}, 2 * 3 * 2 * 34},
		{12, [4]uint64{256, 1, 1, 1}, 144},
		{30, [4]uint64{7, 1, 1, 1}, 14},
	} {
		if got, err := ggmlBytes(c.typ, c.ne); got != c.want || err != "" {
			t.Errorf("ggmlBytes(%d, %v) = %d %q, want %d", c.typ, c.ne, got, err, c.want)
		}
	}
	if _, err := ggmlBytes(0, [4]uint64{1 << 40, 1 << 40, 1, 1}); err == "" {
		t.Error("an element count of 2^80 was accepted")
	}
}

// TestRepacked checks the CPU_REPACK rules.
func TestRepacked(t *testing.T) {
	q4 := func(name string, ne ...uint64) *ggufTensor {
		t := &ggufTensor{name: name, typ: 2, ne: [4]uint64{1, 1, 1, 1}}
		copy(t.ne[:], ne)
		return t
	}
	for _, c := range []struct {
		t     *ggufTensor
		model string
		want  bool
	}{
		{q4("blk.0.attn_q.weight", 512, 512), RepackAVX2, true},
		{q4("blk.0.attn_q.weight", 512, 512), RepackNone, false},
		{q4("output.weight", 512, 259), RepackAVX2, false}, // ne[1] not a multiple of 8
		{q4("token_embd.weight", 512, 256), RepackAVX2, false},
		{q4("blk.0.ffn_up_exps.weight", 512, 256, 8), RepackAVX2, true},
		{q4("blk.0.attn_norm.weight", 512), RepackAVX2, false},
		{&ggufTensor{name: "blk.0.attn_q.weight", typ: 8, ne: [4]uint64{512, 512, 1, 1}}, RepackAVX2, false}, // Q8_0
		{&ggufTensor{name: "blk.0.attn_q.weight", typ: 10, ne: [4]uint64{512, 512, 1, 1}}, RepackAVX2, false},
		{&ggufTensor{name: "blk.0.attn_q.weight", typ: 10, ne: [4]uint64{512, 512, 1, 1}}, RepackAVX512, true},
	} {
		if got := repacked(c.t, c.model); got != c.want {
			t.Errorf("repacked(%s type %d %v, %s) = %v", c.t.name, c.t.typ, c.t.ne, c.model, got)
		}
	}
}
