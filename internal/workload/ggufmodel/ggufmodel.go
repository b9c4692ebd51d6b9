// Package ggufmodel writes format-valid GGUF v3 files of the llama
// architecture with random weights and a tiny byte-level vocabulary: real
// shapes (Llama8B gives 8B-like ones) for loading measurements where no
// model weights can be downloaded, and header-only files (tensor infos, no
// data) for tests.
package ggufmodel

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
)

// Type is a ggml tensor type this writer can fill.
type Type uint32

// Tensor types (ggml_type values).
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q8_0 Type = 8
)

// blockOf returns elements per block and bytes per block.
func (t Type) blockOf() (uint64, uint64, error) {
	switch t {
	case F32:
		return 1, 4, nil
	case F16:
		return 1, 2, nil
	case Q4_0:
		return 32, 18, nil
	case Q8_0:
		return 32, 34, nil
	}
	return 0, 0, fmt.Errorf("ggml type %d is not supported by this writer; use F32, F16, Q4_0 or Q8_0", t)
}

// fileType is general.file_type (llama_ftype) for a model of weight type t.
func (t Type) fileType() uint32 {
	switch t {
	case F32:
		return 0
	case F16:
		return 1
	case Q4_0:
		return 2
	}
	return 7 // LLAMA_FTYPE_MOSTLY_Q8_0
}

// Order is the order tensors are written in.
type Order string

const (
	// OrderHF writes tensors sorted by their Hugging Face checkpoint
	// names (lm_head, model.embed_tokens, model.layers.0., .1., .10., ...,
	// model.norm), the order of many converted files: file order is not
	// llama.cpp's load order, within layers or across them.
	OrderHF Order = "hf"
	// OrderLoad writes tensors in llama.cpp's creation order.
	OrderLoad Order = "load"
)

// Model describes a llama-architecture model.
type Model struct {
	Layers, Embd, FF, Heads, KVHeads int
	Context                          int   // llama.context_length; 0 means 4096
	Type                             Type  // weight type of the 2-D tensors
	Order                            Order // "" means OrderHF
	Alignment                        uint32
	Seed                             uint64
}

// Llama8B returns 8B-like shapes (Llama 3 8B: 32 layers, 4096 wide,
// 14336 feed-forward, 32 heads, 8 KV heads) with weights of type t: about
// 7.4 GB in Q8_0 and 4.0 GB in Q4_0 with the tiny vocabulary.
func Llama8B(t Type) Model {
	return Model{Layers: 32, Embd: 4096, FF: 14336, Heads: 32, KVHeads: 8, Type: t}
}

// Small returns a model of a few tens of MB for quick load checks.
func Small(t Type) Model {
	return Model{Layers: 4, Embd: 512, FF: 1536, Heads: 8, KVHeads: 4, Type: t}
}

// Vocab is the vocabulary size: <unk>, <s>, </s> and the 256 byte tokens.
const Vocab = 259

// Tensor is one tensor of a model.
type Tensor struct {
	Name   string
	HF     string // the Hugging Face checkpoint name it corresponds to
	Type   Type
	Ne     []uint64
	Offset uint64 // in the data section
	Size   uint64
}

func (m *Model) check() error {
	if m.Layers <= 0 || m.Embd <= 0 || m.FF <= 0 || m.Heads <= 0 || m.KVHeads <= 0 || m.Embd%m.Heads != 0 || m.Heads%m.KVHeads != 0 {
		return errors.New("write gguf: model shapes must be positive, embd divisible by heads, heads by kv heads")
	}
	blck, _, err := m.Type.blockOf()
	if err != nil {
		return fmt.Errorf("write gguf: %w", err)
	}
	if uint64(m.Embd)%blck != 0 || uint64(m.FF)%blck != 0 {
		return fmt.Errorf("write gguf: embd %d and ff %d must be multiples of the type's block size %d", m.Embd, m.FF, blck)
	}
	if m.Alignment != 0 && m.Alignment&(m.Alignment-1) != 0 {
		return fmt.Errorf("write gguf: alignment %d is not a power of two", m.Alignment)
	}
	switch m.Order {
	case "", OrderHF, OrderLoad:
	default:
		return fmt.Errorf("write gguf: order %q; valid: %s, %s", m.Order, OrderHF, OrderLoad)
	}
	return nil
}

func (m *Model) align() uint64 {
	if m.Alignment == 0 {
		return 32
	}
	return uint64(m.Alignment)
}

// Tensors returns the model's tensors in file order with their offsets.
func (m Model) Tensors() ([]Tensor, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	e, f, v := uint64(m.Embd), uint64(m.FF), uint64(Vocab)
	kv := e / uint64(m.Heads) * uint64(m.KVHeads)
	w := m.Type
	ts := []Tensor{
		{Name: "token_embd.weight", HF: "model.embed_tokens.weight", Type: w, Ne: []uint64{e, v}},
		{Name: "output_norm.weight", HF: "model.norm.weight", Type: F32, Ne: []uint64{e}},
		{Name: "output.weight", HF: "lm_head.weight", Type: w, Ne: []uint64{e, v}},
	}
	for i := range m.Layers {
		b := fmt.Sprintf("blk.%d.", i)
		h := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts,
			Tensor{Name: b + "attn_norm.weight", HF: h + "input_layernorm.weight", Type: F32, Ne: []uint64{e}},
			Tensor{Name: b + "attn_q.weight", HF: h + "self_attn.q_proj.weight", Type: w, Ne: []uint64{e, e}},
			Tensor{Name: b + "attn_k.weight", HF: h + "self_attn.k_proj.weight", Type: w, Ne: []uint64{e, kv}},
			Tensor{Name: b + "attn_v.weight", HF: h + "self_attn.v_proj.weight", Type: w, Ne: []uint64{e, kv}},
			Tensor{Name: b + "attn_output.weight", HF: h + "self_attn.o_proj.weight", Type: w, Ne: []uint64{e, e}},
			Tensor{Name: b + "ffn_norm.weight", HF: h + "post_attention_layernorm.weight", Type: F32, Ne: []uint64{e}},
			Tensor{Name: b + "ffn_gate.weight", HF: h + "mlp.gate_proj.weight", Type: w, Ne: []uint64{e, f}},
			Tensor{Name: b + "ffn_down.weight", HF: h + "mlp.down_proj.weight", Type: w, Ne: []uint64{f, e}},
			Tensor{Name: b + "ffn_up.weight", HF: h + "mlp.up_proj.weight", Type: w, Ne: []uint64{e, f}},
		)
	}
	if m.Order != OrderLoad {
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].HF < ts[j].HF })
	}
	var off uint64
	for i := range ts {
		t := &ts[i]
		blck, bs, _ := t.Type.blockOf()
		n := uint64(1)
		for _, d := range t.Ne {
			n *= d
		}
		t.Size = n / blck * bs
		t.Offset = off
		off += (t.Size + m.align() - 1) / m.align() * m.align()
	}
	return ts, nil
}

// Write writes the model to w: the header, and the tensor data when
// weights is set (else the file ends after the tensor infos' padding). It
// returns the bytes written.
func Write(w io.Writer, m Model, weights bool) (int64, error) {
	ts, err := m.Tensors()
	if err != nil {
		return 0, err
	}
	cw := &countWriter{w: bufio.NewWriterSize(w, 4<<20)}
	hw := &hdrWriter{w: cw}
	m.writeHeader(hw, ts)
	cw.pad(m.align())
	if hw.err == nil && cw.err == nil && weights {
		r := rand.New(rand.NewPCG(m.Seed, m.Seed^0xda3e39cb94b95bdb))
		start := cw.n
		for i := range ts {
			cw.zero(start + int64(ts[i].Offset) - cw.n)
			fill(cw, &ts[i], r)
		}
		cw.pad(m.align())
	}
	if err := errors.Join(hw.err, cw.err, cw.w.(*bufio.Writer).Flush()); err != nil {
		return cw.n, fmt.Errorf("write gguf: %w", err)
	}
	return cw.n, nil
}

func (m *Model) writeHeader(h *hdrWriter, ts []Tensor) {
	ctx := m.Context
	if ctx == 0 {
		ctx = 4096
	}
	type kv struct {
		key string
		fn  func()
	}
	kvs := []kv{
		{"general.architecture", func() { h.str("llama") }},
		{"general.name", func() { h.str("predictio synthetic llama") }},
		{"general.file_type", func() { h.u32(m.Type.fileType()) }},
		{"llama.context_length", func() { h.u32(uint32(ctx)) }},
		{"llama.embedding_length", func() { h.u32(uint32(m.Embd)) }},
		{"llama.block_count", func() { h.u32(uint32(m.Layers)) }},
		{"llama.feed_forward_length", func() { h.u32(uint32(m.FF)) }},
		{"llama.attention.head_count", func() { h.u32(uint32(m.Heads)) }},
		{"llama.attention.head_count_kv", func() { h.u32(uint32(m.KVHeads)) }},
		{"llama.rope.dimension_count", func() { h.u32(uint32(m.Embd / m.Heads)) }},
		{"llama.rope.freq_base", func() { h.f32(500000) }},
		{"llama.attention.layer_norm_rms_epsilon", func() { h.f32(1e-5) }},
		{"llama.vocab_size", func() { h.u32(Vocab) }},
		{"tokenizer.ggml.model", func() { h.str("llama") }},
		{"tokenizer.ggml.tokens", func() {
			h.arrayOf(typeString, Vocab)
			for i := range Vocab {
				h.rawStr(token(i))
			}
		}},
		{"tokenizer.ggml.scores", func() {
			h.arrayOf(typeF32, Vocab)
			for range Vocab {
				h.rawF32(0)
			}
		}},
		{"tokenizer.ggml.token_type", func() {
			h.arrayOf(typeI32, Vocab)
			for i := range Vocab {
				h.rawU32(tokenType(i))
			}
		}},
		{"tokenizer.ggml.bos_token_id", func() { h.u32(1) }},
		{"tokenizer.ggml.eos_token_id", func() { h.u32(2) }},
		{"tokenizer.ggml.unknown_token_id", func() { h.u32(0) }},
		{"tokenizer.ggml.add_bos_token", func() { h.boolean(true) }},
	}
	if m.Alignment != 0 {
		kvs = append(kvs, kv{"general.alignment", func() { h.u32(m.Alignment) }})
	}
	h.raw([]byte("GGUF"))
	h.rawU32(3)
	h.rawU64(uint64(len(ts)))
	h.rawU64(uint64(len(kvs)))
	for _, e := range kvs {
		h.rawStr(e.key)
		e.fn()
	}
	for _, t := range ts {
		h.rawStr(t.Name)
		h.rawU32(uint32(len(t.Ne)))
		for _, d := range t.Ne {
			h.rawU64(d)
		}
		h.rawU32(uint32(t.Type))
		h.rawU64(t.Offset)
	}
}

func token(i int) string {
	switch i {
	case 0:
		return "<unk>"
	case 1:
		return "<s>"
	case 2:
		return "</s>"
	}
	return fmt.Sprintf("<0x%02X>", i-3)
}

// tokenType is llama_token_type: 2 unknown, 3 control, 6 byte.
func tokenType(i int) uint32 {
	switch i {
	case 0:
		return 2
	case 1, 2:
		return 3
	}
	return 6
}

// fill writes random weights: unit norms, and quantized blocks with a
// small scale so activations stay finite.
func fill(w *countWriter, t *Tensor, r *rand.Rand) {
	var buf [34]byte
	switch t.Type {
	case F32:
		binary.LittleEndian.PutUint32(buf[:], math.Float32bits(1))
		for range t.Size / 4 {
			w.write(buf[:4])
		}
	case F16:
		for i := uint64(0); i < t.Size; i += 2 {
			binary.LittleEndian.PutUint16(buf[:], halfScale(r))
			w.write(buf[:2])
		}
	case Q8_0, Q4_0:
		bs := uint64(34)
		if t.Type == Q4_0 {
			bs = 18
		}
		for i := uint64(0); i < t.Size; i += bs {
			binary.LittleEndian.PutUint16(buf[:], halfScale(r))
			for j := uint64(2); j < bs; j += 8 {
				v := r.Uint64()
				for k := uint64(0); k < 8 && j+k < bs; k++ {
					buf[j+k] = byte(v >> (8 * k))
				}
			}
			w.write(buf[:bs])
		}
	}
}

// halfScale returns a random float16 in about [0.001, 0.004).
func halfScale(r *rand.Rand) uint16 {
	// exponent 5 bits biased 15: 2^-10 .. 2^-8
	return uint16(5+r.IntN(2))<<10 | uint16(r.IntN(1024))
}

// countWriter counts bytes and keeps the first error.
type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

var zeros [4096]byte

func (c *countWriter) zero(n int64) {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		c.write(zeros[:k])
		n -= k
	}
}

func (c *countWriter) pad(align uint64) {
	if r := uint64(c.n) % align; r != 0 {
		c.zero(int64(align - r))
	}
}

const (
	typeU32    = 4
	typeI32    = 5
	typeF32    = 6
	typeBool   = 7
	typeString = 8
	typeArray  = 9
)

// hdrWriter writes GGUF header values, little-endian.
type hdrWriter struct {
	w   *countWriter
	err error
	b   [8]byte
}

func (h *hdrWriter) raw(b []byte) { h.w.write(b) }
func (h *hdrWriter) rawU32(v uint32) {
	binary.LittleEndian.PutUint32(h.b[:], v)
	h.raw(h.b[:4])
}
func (h *hdrWriter) rawU64(v uint64) {
	binary.LittleEndian.PutUint64(h.b[:], v)
	h.raw(h.b[:8])
}
func (h *hdrWriter) rawF32(v float32) { h.rawU32(math.Float32bits(v)) }
func (h *hdrWriter) rawStr(s string) {
	h.rawU64(uint64(len(s)))
	h.raw([]byte(s))
}
func (h *hdrWriter) u32(v uint32)  { h.rawU32(typeU32); h.rawU32(v) }
func (h *hdrWriter) f32(v float32) { h.rawU32(typeF32); h.rawF32(v) }
func (h *hdrWriter) str(s string)  { h.rawU32(typeString); h.rawStr(s) }
func (h *hdrWriter) boolean(v bool) {
	h.rawU32(typeBool)
	b := byte(0)
	if v {
		b = 1
	}
	h.raw([]byte{b})
}
func (h *hdrWriter) arrayOf(elem uint32, n int) {
	h.rawU32(typeArray)
	h.rawU32(elem)
	h.rawU64(uint64(n))
}
