package bench

import (
	"math/bits"
	"time"
)

// histSub is log2 of the linear sub-buckets per power of two: 128
// sub-buckets bound the relative error of a recorded value by 1/128 (0.8%).
const histSub = 7

// Histogram is an HDR-style log-linear latency histogram over nanoseconds:
// values below 128 ns are exact, above that every power of two is split into
// 128 equal buckets. Record never allocates. The zero value is ready.
type Histogram struct {
	counts [(64 - histSub + 1) << histSub]uint64
	n      uint64
	max    uint64
}

func histIndex(v uint64) int {
	if v < 1<<histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSub - 1
	return (e+1)<<histSub + int(v>>uint(e)) - 1<<histSub
}

// histValue is the midpoint of bucket i.
func histValue(i int) uint64 {
	if i < 1<<histSub {
		return uint64(i)
	}
	e := i>>histSub - 1
	m := uint64(i&(1<<histSub-1)) + 1<<histSub
	return m<<uint(e) + (uint64(1)<<uint(e))/2
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[histIndex(v)]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	if o.max > h.max {
		h.max = o.max
	}
}

// Quantile returns the value at quantile q (0..1), within 0.8%.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := histValue(i)
			if v > h.max {
				v = h.max
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
