package harness

import (
	"math"
	"slices"
)

// Summary condenses the values of repeated rounds of one measurement. The
// values are kept, in round order, so that a reader can see the spread.
type Summary struct {
	N      int       `json:"n"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Mean   float64   `json:"mean"`
	Stdev  float64   `json:"stdev"` // sample standard deviation; 0 for one value
	Values []float64 `json:"values"`
}

// Summarize returns the summary of vs; NaN values are dropped. An empty
// input gives a zero Summary with N 0.
func Summarize(vs []float64) Summary {
	clean := make([]float64, 0, len(vs))
	for _, v := range vs {
		if !math.IsNaN(v) {
			clean = append(clean, v)
		}
	}
	s := Summary{N: len(clean), Values: clean}
	if len(clean) == 0 {
		return s
	}
	sorted := slices.Clone(clean)
	slices.Sort(sorted)
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	s.Median = Quantile(sorted, 0.5)
	var sum float64
	for _, v := range sorted {
		sum += v
	}
	s.Mean = sum / float64(len(sorted))
	if len(sorted) > 1 {
		var ss float64
		for _, v := range sorted {
			ss += (v - s.Mean) * (v - s.Mean)
		}
		s.Stdev = math.Sqrt(ss / float64(len(sorted)-1))
	}
	return s
}

// Quantile returns the q-quantile (0 <= q <= 1) of sorted values with
// linear interpolation between closest ranks; NaN for no values.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo == hi {
		return sorted[lo]
	}
	f := pos - float64(lo)
	return sorted[lo]*(1-f) + sorted[hi]*f
}
