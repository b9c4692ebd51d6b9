package main

import (
	"flag"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Every numeric and duration flag of every subcommand declares its allowed
// values with limit, in one line after the flag's definition:
//
//	fs.IntVar(&opt.Repeat, "repeat", 1, "rounds of the run specs")
//	limit(fs, "repeat", 1, 10000)
//	dur := fs.Duration("duration", 0, "stop after this long; 0: no limit")
//	limit(fs, "duration", time.Millisecond, 8760*time.Hour).orZero("no limit")
//
// parseFlags (and so parseArgs and parseInterspersed) then refuses a value
// outside the range with exit status 2 and a message naming the flag and
// the range, before the subcommand does any I/O or privilege check.
// TestFlagRanges fails for a numeric flag that declares no range.

// number is what limit bounds: the types flag.Getter returns for the flag
// package's numeric and duration flags (and for sizeFlag).
type number interface {
	~int | ~int64 | ~uint | ~uint64 | ~float64
}

// bound is the declared range of one flag.
type bound struct {
	name   string
	lo, hi string // formatted ends of the range
	loV    any    // the ends as the flag's type, for TestFlagRanges
	hiV    any
	zero   string // what 0 means, when 0 is allowed outside [lo, hi]
	pow2   bool
	// in reports whether v (the flag's Get value) is allowed, ignoring
	// zero and pow2; isZero whether v is 0.
	in func(v any) (ok, isZero bool)
	// integer converts v to a uint64 for the power-of-two check.
	integer func(v any) (uint64, bool)
	flag    *flag.Flag
	usage   string // the flag's usage without the range
}

var (
	boundsMu sync.Mutex
	bounds   = map[*flag.FlagSet]map[string]*bound{}
)

// limit declares that flag name of fs takes values from lo to hi
// (inclusive). T must be the type the flag's Get returns: int for IntVar,
// uint64 for Uint64Var, time.Duration for Duration, and so on. limit panics
// on a flag that does not exist or has another type: TestFlagRanges runs
// every subcommand's flag definitions, so the mistake fails the tests.
func limit[T number](fs *flag.FlagSet, name string, lo, hi T) *bound {
	f := fs.Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("limit: %s has no flag --%s", fs.Name(), name))
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		panic(fmt.Sprintf("limit: %s --%s: its flag.Value has no Get method", fs.Name(), name))
	}
	if _, ok := g.Get().(T); !ok {
		panic(fmt.Sprintf("limit: %s --%s holds %T, not %T", fs.Name(), name, g.Get(), lo))
	}
	b := &bound{
		name: name, lo: formatNumber(lo), hi: formatNumber(hi), loV: lo, hiV: hi,
		in: func(v any) (bool, bool) {
			x := v.(T)
			return x >= lo && x <= hi, x == 0 // NaN fails x >= lo
		},
		integer: func(v any) (uint64, bool) {
			x := v.(T)
			if x < 0 || T(uint64(x)) != x {
				return 0, false
			}
			return uint64(x), true
		},
	}
	b.flag = f
	b.usage = f.Usage
	b.document()
	boundsMu.Lock()
	defer boundsMu.Unlock()
	if bounds[fs] == nil {
		bounds[fs] = map[string]*bound{}
	}
	bounds[fs][name] = b
	return b
}

// orZero also allows 0, which means what (e.g. "no limit", "default 256").
func (b *bound) orZero(what string) *bound { b.zero = what; b.document(); return b }

// powerOfTwo also requires a power of two (0 stays allowed by orZero).
func (b *bound) powerOfTwo() *bound { b.pow2 = true; b.document(); return b }

// document appends the range to the flag's usage, for -h.
func (b *bound) document() { b.flag.Usage = b.usage + " [" + b.want() + "]" }

// want describes the allowed values: "1 to 4096", "0 (no limit) or 1ms to 8760h".
func (b *bound) want() string {
	s := b.lo + " to " + b.hi
	if b.pow2 {
		s = "a power of two from " + s
	}
	if b.zero != "" {
		s = "0 (" + b.zero + ") or " + s
	}
	return s
}

// check reports whether v is allowed.
func (b *bound) check(v any) bool {
	ok, isZero := b.in(v)
	if isZero && b.zero != "" {
		return true
	}
	if !ok {
		return false
	}
	if b.pow2 {
		n, ok := b.integer(v)
		return ok && bits.OnesCount64(n) == 1
	}
	return true
}

// checkRanges returns an error naming the first flag of fs (by name) whose
// value is outside its declared range.
func checkRanges(fs *flag.FlagSet) error {
	boundsMu.Lock()
	bs := bounds[fs]
	boundsMu.Unlock()
	names := make([]string, 0, len(bs))
	for n := range bs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b := bs[n]
		f := fs.Lookup(n)
		if !b.check(f.Value.(flag.Getter).Get()) {
			return fmt.Errorf("flag --%s %s is out of range: want %s", n, f.Value.String(), b.want())
		}
	}
	return nil
}

// rangeHint returns "flag --NAME: want RANGE" when err, a flag package parse
// error such as `invalid value "1e999" for flag -speed: value out of range`,
// is about a flag of fs with a declared range; else "".
func rangeHint(fs *flag.FlagSet, err error) string {
	boundsMu.Lock()
	defer boundsMu.Unlock()
	for n, b := range bounds[fs] {
		if strings.Contains(err.Error(), " for flag -"+n+":") {
			return fmt.Sprintf("flag --%s: want %s", n, b.want())
		}
	}
	return ""
}

// formatNumber formats a range end: durations without trailing zero units
// (8760h, not 8760h0m0s), other numbers in plain decimal.
func formatNumber(v any) string {
	switch x := v.(type) {
	case time.Duration:
		s := x.String()
		for _, z := range []string{"0s", "0m"} {
			if strings.HasSuffix(s, "m"+z) || strings.HasSuffix(s, "h"+z) {
				s = strings.TrimSuffix(s, z)
			}
		}
		return s
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatFloat(x, 'f', -1, 64) // 1000000, not 1e+06
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}
