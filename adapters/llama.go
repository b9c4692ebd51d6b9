package adapters

import (
	"sort"
	"strconv"
	"strings"
)

// llama.cpp's load order. llama_model_llama::load_arch_tensors
// (src/models/llama.cpp of the llama.cpp that node-llama-cpp 3.22.1
// bundles) creates token_embd, output_norm and output, then for each layer
// attn_norm, the attention weights (create_tensor_qkv: a fused attn_qkv if
// present, else attn_q, attn_k, attn_v, then their biases), attn_output and
// its bias, ffn_norm, the rope factors (layer 0 only), then ffn_gate,
// ffn_down, ffn_up and their biases, or for mixture-of-experts layers
// ffn_gate_inp, the expert tensors and the shared experts. Without mmap,
// llama_model_loader::load_all_data reads the tensors of each buffer
// type's context in that creation order. The CPU backend repacks some
// quantized weights (ggml-cpu repack.cpp, ggml_repack_get_optimal_repack_type:
// on x86 with AVX2 Q4_0, Q4_K, IQ4_NL and MXFP4 matrices whose second
// dimension is a multiple of 8, with AVX-512 also Q2_K) into its CPU_REPACK
// buffer type, which is not a host buffer: without mmap load_tensors loads
// those contexts first and load_all_data stages their tensors biggest
// first.

// llamaGlobal ranks the tensors created before the layers.
var llamaGlobal = map[string]int{
	"token_embd.weight":         0,
	"token_embd_norm.weight":    1,
	"token_embd_norm.bias":      2,
	"output_norm.weight":        3,
	"output_norm.bias":          4,
	"output.weight":             5,
	"output.bias":               6,
	"rope_freqs.weight":         -1, // created in layer 0, after ffn_norm
	"rope_factors_long.weight":  -1,
	"rope_factors_short.weight": -1,
}

// llamaLayer is the creation order of a layer's tensors.
var llamaLayer = []string{
	"attn_norm.weight",
	"attn_qkv.weight", "attn_qkv.bias",
	"attn_q.weight", "attn_k.weight", "attn_v.weight",
	"attn_q.bias", "attn_k.bias", "attn_v.bias",
	"attn_output.weight", "attn_output.bias",
	"ffn_norm.weight",
	"rope_factors_long.weight", "rope_factors_short.weight", "rope_freqs.weight",
	"ffn_gate.weight", "ffn_down.weight", "ffn_up.weight",
	"ffn_gate.bias", "ffn_down.bias", "ffn_up.bias",
	"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_down_exps.weight", "ffn_up_exps.weight",
	"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
}

var llamaLayerRank = func() map[string]int {
	m := make(map[string]int, len(llamaLayer))
	for i, n := range llamaLayer {
		m[n] = i
	}
	return m
}()

// llamaKey orders one tensor: group 0 before the layers, 1 in a layer, 2
// names llama.cpp does not create (after everything, in file order).
type llamaKey struct {
	group, layer, idx int
}

func llamaKeyOf(name string) llamaKey {
	if r, ok := llamaGlobal[name]; ok {
		if r >= 0 {
			return llamaKey{0, 0, r}
		}
		return llamaKey{1, 0, llamaLayerRank[name]}
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return llamaKey{2, 0, 0}
	}
	num, suffix, ok := strings.Cut(rest, ".")
	layer, err := strconv.Atoi(num)
	if !ok || err != nil || layer < 0 {
		return llamaKey{2, 0, 0}
	}
	if r, ok := llamaLayerRank[suffix]; ok {
		return llamaKey{1, layer, r}
	}
	return llamaKey{1, layer, len(llamaLayer)} // unknown: end of its layer
}

// repacked reports whether llama.cpp's CPU backend with the repack model
// (RepackAVX2, RepackAVX512) puts t in its CPU_REPACK buffer: a matrix
// multiplied by activations (2-D weights other than the token embedding,
// 3-D expert weights) of a repackable type with ne[1] a multiple of 8.
func repacked(t *ggufTensor, model string) bool {
	switch t.typ {
	case 2, 12, 20, 39: // Q4_0, Q4_K, IQ4_NL, MXFP4
	case 10: // Q2_K
		if model != RepackAVX512 {
			return false
		}
	default:
		return false
	}
	if model == RepackNone || t.ne[1]%8 != 0 || t.name == "token_embd.weight" {
		return false
	}
	dims := 1
	for d := range ggufMaxDims {
		if t.ne[d] > 1 {
			dims = d + 1
		}
	}
	return dims == 2 || (dims == 3 && strings.Contains(t.name, "_exps"))
}

// llamaOrder returns tensor indices in the order llama.cpp reads them
// without mmap: repacked tensors biggest first, then the others, each in
// creation order; ties (names llama.cpp does not create) keep file order.
// byOff is the file order.
func llamaOrder(ts []ggufTensor, byOff []int32, repack string) []int32 {
	keys := make([]llamaKey, len(ts))
	for i := range ts {
		keys[i] = llamaKeyOf(ts[i].name)
	}
	out := append([]int32(nil), byOff...)
	sort.SliceStable(out, func(a, b int) bool {
		ta, tb := &ts[out[a]], &ts[out[b]]
		if ra, rb := repacked(ta, repack), repacked(tb, repack); ra != rb {
			return ra
		} else if ra && ta.size != tb.size {
			return ta.size > tb.size
		}
		x, y := keys[out[a]], keys[out[b]]
		if x.group != y.group {
			return x.group < y.group
		}
		if x.layer != y.layer {
			return x.layer < y.layer
		}
		return x.idx < y.idx
	})
	return out
}
