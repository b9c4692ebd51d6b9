package ggufmodel

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

func TestLlama8BTensors(t *testing.T) {
	ts, err := Llama8B(Q8_0).Tensors()
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3+32*9 {
		t.Fatalf("%d tensors", len(ts))
	}
	names := map[string]bool{}
	var total, end uint64
	for i, x := range ts {
		if names[x.Name] {
			t.Errorf("duplicate %s", x.Name)
		}
		names[x.Name] = true
		if x.Offset%32 != 0 || x.Offset < end {
			t.Errorf("%s at %d: not aligned after the previous tensor (ends %d)", x.Name, x.Offset, end)
		}
		if i > 0 && ts[i-1].HF > x.HF {
			t.Errorf("%s after %s: not in Hugging Face name order", x.HF, ts[i-1].HF)
		}
		end = x.Offset + x.Size
		total += x.Size
	}
	if ts[0].Name != "output.weight" || ts[1].Name != "token_embd.weight" || ts[2].Name != "blk.0.attn_norm.weight" || ts[len(ts)-1].Name != "output_norm.weight" {
		t.Errorf("file order starts %s, %s, %s and ends %s", ts[0].Name, ts[1].Name, ts[2].Name, ts[len(ts)-1].Name)
	}
	// 32 layers of 4096*(4096+1024+1024+4096) + 3*4096*14336 weights at
	// 34 bytes a 32, plus the embeddings and norms.
	want := uint64(32)*((4096*(4096+1024+1024+4096)+3*4096*14336)/32*34+2*4096*4) + 2*4096*Vocab/32*34 + 4096*4
	if total != want {
		t.Errorf("%d bytes of weights, want %d", total, want)
	}
	m := Llama8B(Q8_0)
	m.Order = OrderLoad
	ts, _ = m.Tensors()
	if ts[0].Name != "token_embd.weight" || ts[3].Name != "blk.0.attn_norm.weight" {
		t.Errorf("load order starts %s ... %s", ts[0].Name, ts[3].Name)
	}
}

// TestWrite checks that a header-only file is the full file's prefix, the
// header fields, and the weights' values.
func TestWrite(t *testing.T) {
	for _, typ := range []Type{Q8_0, Q4_0, F16} {
		m := Small(typ)
		m.Alignment = 64
		var full, hdr bytes.Buffer
		n, err := Write(&full, m, true)
		if err != nil || n != int64(full.Len()) {
			t.Fatalf("write: %d %v", n, err)
		}
		if _, err := Write(&hdr, m, false); err != nil {
			t.Fatal(err)
		}
		f, h := full.Bytes(), hdr.Bytes()
		if !bytes.HasPrefix(f, h) || len(h)%64 != 0 {
			t.Fatalf("%d: header of %d bytes is not an aligned prefix of the %d-byte file", typ, len(h), len(f))
		}
		le := binary.LittleEndian
		if string(f[:4]) != "GGUF" || le.Uint32(f[4:]) != 3 || le.Uint64(f[8:]) != 3+4*9 {
			t.Errorf("header %x", f[:24])
		}
		ts, _ := m.Tensors()
		last := ts[len(ts)-1]
		if uint64(len(f)) != uint64(len(h))+(last.Offset+last.Size+63)/64*64 {
			t.Errorf("file of %d bytes; data should end at %d", len(f), uint64(len(h))+last.Offset+last.Size)
		}
		for _, x := range ts {
			d := f[uint64(len(h))+x.Offset:]
			switch x.Type {
			case F32:
				if math.Float32frombits(le.Uint32(d)) != 1 {
					t.Errorf("%s: norm weight %v", x.Name, d[:4])
				}
			case Q8_0, Q4_0, F16:
				scale := le.Uint16(d) // a float16 in [2^-10, 2^-8)
				if e := scale >> 10; e < 5 || e > 6 {
					t.Errorf("%s: scale %#x out of range", x.Name, scale)
				}
			}
		}
		for _, key := range []string{"general.architecture", "llama.block_count", "tokenizer.ggml.tokens", "<0xFF>", "general.alignment"} {
			if !bytes.Contains(h, []byte(key)) {
				t.Errorf("header lacks %s", key)
			}
		}
	}
	for _, m := range []Model{
		{Layers: 0, Embd: 64, FF: 64, Heads: 2, KVHeads: 1, Type: Q8_0},
		{Layers: 1, Embd: 48, FF: 64, Heads: 2, KVHeads: 1, Type: Q8_0},
		{Layers: 1, Embd: 64, FF: 64, Heads: 2, KVHeads: 1, Type: 12},
		{Layers: 1, Embd: 64, FF: 64, Heads: 2, KVHeads: 1, Type: Q8_0, Alignment: 48},
	} {
		if _, err := Write(&bytes.Buffer{}, m, false); err == nil || !strings.HasPrefix(err.Error(), "write gguf: ") {
			t.Errorf("%+v: %v", m, err)
		}
	}
}
