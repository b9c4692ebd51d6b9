package parquet

import (
	"encoding/binary"
	"math/bits"
)

// pack appends vals bit-packed LSB first, w bits each (w ≤ 64); len(vals)·w
// must be a multiple of 8.
func pack(dst []byte, vals []uint64, w uint) []byte {
	if w == 0 {
		return dst
	}
	var acc uint64
	var n uint // bits in acc
	for _, v := range vals {
		if w < 64 {
			v &= 1<<w - 1
		}
		acc |= v << n
		if n+w < 64 {
			n += w
			continue
		}
		dst = binary.LittleEndian.AppendUint64(dst, acc)
		spill := n + w - 64
		acc = 0
		if spill > 0 {
			acc = v >> (w - spill)
		}
		n = spill
	}
	for ; n > 0; n -= min(n, 8) {
		dst = append(dst, byte(acc))
		acc >>= 8
	}
	return dst
}

// Delta binary packing (Parquet's DELTA_BINARY_PACKED): blocks of 128
// deltas in 4 miniblocks of 32.
const (
	deltaBlock = 128
	deltaMinis = 4
	deltaMini  = deltaBlock / deltaMinis
)

// appendDelta appends v DELTA_BINARY_PACKED. With narrow (an INT32
// column) the deltas wrap at 32 bits, as the reader computes them.
func appendDelta(dst []byte, v []int64, narrow bool, scratch *[deltaBlock]uint64) []byte {
	dst = binary.AppendUvarint(dst, deltaBlock)
	dst = binary.AppendUvarint(dst, deltaMinis)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	if len(v) == 0 {
		return binary.AppendVarint(dst, 0)
	}
	first := v[0]
	if narrow {
		first = int64(int32(first))
	}
	dst = binary.AppendVarint(dst, first)
	for i := 1; i < len(v); i += deltaBlock {
		end := min(i+deltaBlock, len(v))
		dst = deltaBlockOf(dst, v[i-1:end], narrow, scratch)
	}
	return dst
}

// deltaBlockOf appends one block: the deltas between consecutive values
// of v (at most deltaBlock+1 of them).
func deltaBlockOf(dst []byte, v []int64, narrow bool, d *[deltaBlock]uint64) []byte {
	n := len(v) - 1
	minDelta := int64(0)
	for i := range n {
		delta := v[i+1] - v[i]
		if narrow {
			delta = int64(int32(delta))
		}
		if i == 0 || delta < minDelta {
			minDelta = delta
		}
		d[i] = uint64(delta)
	}
	for i := range n {
		d[i] -= uint64(minDelta)
		if narrow {
			d[i] = uint64(uint32(d[i]))
		}
	}
	clear(d[n:])
	dst = binary.AppendVarint(dst, minDelta)
	var widths [deltaMinis]uint
	for m := range deltaMinis {
		var or uint64
		for _, x := range d[m*deltaMini : (m+1)*deltaMini] {
			or |= x
		}
		widths[m] = uint(bits.Len64(or))
		dst = append(dst, byte(widths[m]))
	}
	for m := 0; m*deltaMini < n; m++ {
		dst = pack(dst, d[m*deltaMini:(m+1)*deltaMini], widths[m])
	}
	return dst
}

// appendHybrid appends v (values of w bits, w ≤ 32) in the RLE/bit-packed
// hybrid encoding: runs of 8 or more equal values as RLE runs, the rest
// bit-packed in groups of 8 (the last group padded with zeros).
func appendHybrid(dst []byte, v []uint32, w uint, group *[8]uint64) []byte {
	for i := 0; i < len(v); {
		if r := runLen(v, i); r >= 8 {
			dst = binary.AppendUvarint(dst, uint64(r)<<1)
			for b := uint(0); b < w; b += 8 {
				dst = append(dst, byte(v[i]>>b))
			}
			i += r
			continue
		}
		j := i + 8
		for j < len(v) && runLen(v, j) < 8 {
			j += 8
		}
		groups := (min(j, len(v)) - i + 7) / 8
		dst = binary.AppendUvarint(dst, uint64(groups)<<1|1)
		for g := range groups {
			clear(group[:])
			for k := range 8 {
				if x := i + g*8 + k; x < len(v) {
					group[k] = uint64(v[x])
				}
			}
			dst = pack(dst, group[:], w)
		}
		i += groups * 8
	}
	return dst
}

// runLen is the number of values equal to v[i] from i on.
func runLen(v []uint32, i int) int {
	j := i + 1
	for j < len(v) && v[j] == v[i] {
		j++
	}
	return j - i
}

// bitWidth is the number of bits values up to top need (at least 1).
func bitWidth(top uint32) uint { return uint(max(1, bits.Len32(top))) }
