package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cli runs 'predictio ARGS' in this process and returns what it printed.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	capture := func(f **os.File) func() string {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		old := *f
		*f = w
		done := make(chan []byte)
		go func() { b, _ := io.ReadAll(r); done <- b }()
		return func() string { w.Close(); *f = old; return string(<-done) }
	}
	endOut, endErr := capture(&os.Stdout), capture(&os.Stderr)
	code = run(args)
	return endOut(), endErr(), code
}

// subcommandPaths returns every (sub)command path that has its own flags:
// "replay", "replay materialize", "trace info", "bench engine", ...
func subcommandPaths() [][]string {
	var paths [][]string
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		subs := commands[n].subcommands
		if n == "trace" {
			for s := range traceSubs {
				subs = append(subs, s)
			}
			sort.Strings(subs)
		}
		if n != "trace" && n != "train" && n != "bench" {
			paths = append(paths, []string{n}) // the command itself has flags
		}
		for _, s := range subs {
			paths = append(paths, []string{n, s})
		}
	}
	return paths
}

// flagSetsOf runs path with -h and returns the flag sets it made.
func flagSetsOf(t *testing.T, path []string) []*flag.FlagSet {
	t.Helper()
	var sets []*flag.FlagSet
	flagSetHook = func(fs *flag.FlagSet) { sets = append(sets, fs) }
	defer func() { flagSetHook = nil }()
	if _, stderr, code := cli(t, append(append([]string{}, path...), "-h")...); code != 0 {
		t.Fatalf("%v -h: exit %d\n%s", path, code, stderr)
	}
	if len(sets) == 0 {
		t.Fatalf("%v -h made no flag set: list nested subcommands in command.subcommands", path)
	}
	return sets
}

// numericFlag reports whether f holds a number or a duration.
func numericFlag(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	switch g.Get().(type) {
	case int, int64, uint, uint64, float64, time.Duration:
		return true
	}
	return false
}

// textNumeric lists the string flags that carry numbers (sizes, lists,
// ids) with values each subcommand must refuse with exit status 2 and a
// message naming the flag, given the other arguments in args (these flags
// are checked after the required ones). TestFlagRanges fails for a string
// flag whose default starts with a digit and that is not listed here.
var textNumeric = map[string]struct{ args, bad []string }{
	"replay --cache":         {nowhere, []string{"-5", "0", "1B", "x"}},
	"simulate --cache":       {nowhere, []string{"-1MiB", "0", "1e30GiB"}},
	"train markov --cache":   {[]string{"-o", "/nonexistent/model", "/nonexistent/bundle"}, []string{"-1MiB", "0", "1e30GiB"}},
	"bench engine --qd":      {noFile, []string{"0", "-1", "4097", "1,x"}},
	"bench engine --threads": {noFile, []string{"0", "257"}},
	"bench engine --size":    {noFile, []string{"0", "-1G", "1.5G", "99999999T"}},
	"bench device --size":    {noFile, []string{"1M", "0"}},
	"record --pid":           {nil, []string{"-1", "0", "4194305", "x"}},
	"run --latency":          {[]string{"--", "/bin/true"}, []string{"-1ms", "50us", "2s", "fast"}},
	"record --hints-uid":     {nil, []string{"-1", "4294967295", "x"}},
	"trace slice --from":     {[]string{"-o", "/nonexistent/out", "/nonexistent/bundle"}, []string{"-1s", "x"}},
	"trace slice --to":       {[]string{"-o", "/nonexistent/out", "/nonexistent/bundle"}, []string{"-1s", "x"}},
}

var (
	// nowhere is a bundle argument that does not exist: a check that ran
	// after opening it would exit 1, not 2.
	nowhere = []string{"/nonexistent/predictio-flag-test"}
	noFile  = []string{"--file", "/nonexistent/predictio-flag-test"}
)

// outside returns values of b's type just outside its range, and 0 when 0
// is neither in the range nor allowed by orZero; a power-of-two bound also
// gets a value in range that is not one.
func outside(t *testing.T, b *bound) []string {
	var vs []string
	switch lo := b.loV.(type) {
	case int:
		hi := b.hiV.(int)
		if lo > math.MinInt {
			vs = append(vs, strconv.Itoa(lo-1))
		}
		if hi < math.MaxInt {
			vs = append(vs, strconv.Itoa(hi+1))
		}
		if b.zero == "" && lo > 0 {
			vs = append(vs, "0")
		}
		if lo >= 0 {
			vs = append(vs, "-1")
		}
		if b.pow2 && lo+1 < hi {
			vs = append(vs, strconv.Itoa(lo+1))
		}
	case int64:
		hi := b.hiV.(int64)
		if lo > math.MinInt64 {
			vs = append(vs, strconv.FormatInt(lo-1, 10))
		}
		if hi < math.MaxInt64 {
			vs = append(vs, strconv.FormatInt(hi+1, 10))
		}
	case uint:
		hi := b.hiV.(uint)
		if hi < math.MaxUint {
			vs = append(vs, strconv.FormatUint(uint64(hi)+1, 10))
		}
		if lo > 1 {
			vs = append(vs, strconv.FormatUint(uint64(lo)-1, 10))
		}
		vs = append(vs, "-1")
	case uint64:
		hi := b.hiV.(uint64)
		if hi < math.MaxUint64 {
			vs = append(vs, strconv.FormatUint(hi+1, 10))
		}
		if lo > 1 {
			vs = append(vs, strconv.FormatUint(lo-1, 10))
		}
		if lo > 0 && b.zero == "" {
			vs = append(vs, "0")
		}
		if b.pow2 && lo+1 < hi {
			vs = append(vs, strconv.FormatUint(lo+1, 10))
		}
		vs = append(vs, "-1")
	case float64:
		hi := b.hiV.(float64)
		vs = append(vs, strconv.FormatFloat(hi*2, 'g', -1, 64), "NaN", "Inf", "-1")
		if lo > 0 {
			vs = append(vs, strconv.FormatFloat(lo/2, 'g', -1, 64), "1e-300", "0")
		}
	case time.Duration:
		hi := b.hiV.(time.Duration)
		vs = append(vs, (hi + time.Second).String(), "-5s")
		if lo > time.Nanosecond {
			vs = append(vs, (lo - time.Nanosecond).String())
		}
		if b.zero == "" {
			vs = append(vs, "0s")
		}
	default:
		t.Errorf("--%s: no out-of-range values for %T", b.name, lo)
	}
	if b.zero != "" { // 0 is allowed
		vs = slices.DeleteFunc(vs, func(v string) bool { return v == "0" || v == "0s" })
	}
	return vs
}

// inside returns the ends of b's range, and 0 where orZero allows it.
func inside(b *bound) []string {
	vs := []string{formatArg(b.loV), formatArg(b.hiV)}
	if b.zero != "" {
		vs = append(vs, "0")
	}
	return vs
}

func formatArg(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// TestFlagRanges enumerates every flag of every registered subcommand:
// each numeric or duration flag must declare its range with limit, its
// default must be in range, the ends of the range (and 0 where documented)
// must be accepted, and values just outside it refused with exit status 2
// and a message naming the flag and the range, before any I/O (the bundle
// argument does not exist, so a check after opening it would exit 1).
func TestFlagRanges(t *testing.T) {
	seenText := map[string]bool{}
	for _, path := range subcommandPaths() {
		for _, fs := range flagSetsOf(t, path) {
			boundsMu.Lock()
			bs := bounds[fs]
			boundsMu.Unlock()
			if err := checkRanges(fs); err != nil {
				t.Errorf("%s: default out of its own range: %v", fs.Name(), err)
			}
			fs.VisitAll(func(f *flag.Flag) {
				id := fs.Name() + " --" + f.Name
				if !numericFlag(f) {
					if tn, ok := textNumeric[id]; ok {
						seenText[id] = true
						for _, v := range tn.bad {
							checkRefused(t, path, f.Name, v, "", tn.args)
						}
					} else if f.DefValue != "" && f.DefValue[0] >= '0' && f.DefValue[0] <= '9' {
						t.Errorf("%s (default %q) looks numeric but is a string flag with no bad values in textNumeric", id, f.DefValue)
					}
					return
				}
				b := bs[f.Name]
				if b == nil {
					t.Errorf("%s: numeric flag without a declared range; add limit(fs, %q, lo, hi) after its definition", id, f.Name)
					return
				}
				if !strings.Contains(f.Usage, "["+b.want()+"]") {
					t.Errorf("%s: -h does not show the range: %q", id, f.Usage)
				}
				for _, v := range inside(b) {
					if err := fs.Set(f.Name, v); err != nil {
						t.Errorf("%s %s: %v", id, v, err)
					} else if err := checkRanges(fs); err != nil {
						t.Errorf("%s %s refused: %v", id, v, err)
					}
				}
				if err := fs.Set(f.Name, f.DefValue); err != nil {
					t.Errorf("%s: reset to default %q: %v", id, f.DefValue, err)
				}
				for _, v := range outside(t, b) {
					checkRefused(t, path, f.Name, v, b.want(), nowhere)
				}
			})
		}
	}
	for id := range textNumeric {
		if !seenText[id] {
			t.Errorf("textNumeric lists %s, which no subcommand has", id)
		}
	}
}

// checkRefused runs path --name=value and then rest, and wants exit status
// 2 and a message naming the flag (and want, if set).
func checkRefused(t *testing.T, path []string, name, value, want string, rest []string) {
	t.Helper()
	args := append(append(append([]string{}, path...), "--"+name+"="+value), rest...)
	_, stderr, code := cli(t, args...)
	if code != 2 || !strings.Contains(stderr, "--"+name) || (want != "" && !strings.Contains(stderr, want)) {
		t.Errorf("%s: exit %d, want 2 with a message naming --%s and %q; stderr:\n%s", strings.Join(args, " "), code, name, want, lastLines(stderr, 3))
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// TestFlagRangesIssue15 runs the values issue 15 found accepted.
func TestFlagRangesIssue15(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--repeat", "-3", "/nonexistent"}, "flag --repeat -3 is out of range: want 1 to 10000"},
		{[]string{"replay", "--qd", "-1", "/nonexistent"}, "flag --qd -1 is out of range: want 1 to 4096"},
		{[]string{"replay", "--speed", "1e-300", "/nonexistent"}, "flag --speed 1e-300 is out of range: want 0.001 to 1000000"},
		// Were the check missing, this would record true into a temp dir.
		{[]string{"record", "--duration", "-5s", "-o", filepath.Join(t.TempDir(), "b"), "--", "true"}, "flag --duration -5s is out of range: want 0 (until the target ends) or 1ms to 8760h"},
		{[]string{"replay", "--speed", "1e999", "/nonexistent"}, "flag --speed: want 0.001 to 1000000"},
		{[]string{"trace", "synth", "-o", filepath.Join(t.TempDir(), "b"), "--pattern", "btree", "--stride", "1"}, "flag --stride 1 is out of range for --pattern btree"},
		{[]string{"trace", "synth", "-o", filepath.Join(t.TempDir(), "b"), "--pattern", "zipf", "--files", "2"}, "flag --files 2 is out of range for --pattern zipf"},
		{[]string{"trace", "synth", "-o", filepath.Join(t.TempDir(), "b"), "--pattern", "zipf", "--file-pages", "67108865"}, "flag --file-pages 67108865 is out of range for --pattern zipf"},
		{[]string{"trace", "synth", "-o", filepath.Join(t.TempDir(), "b"), "--pattern", "zipf", "--zipf-s", "0"}, "flag --zipf-s 0 is out of range: want 1e-09 to 10"},
	} {
		_, stderr, code := cli(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q; stderr:\n%s", c.args, code, c.want, lastLines(stderr, 3))
		}
	}
	if _, stderr, code := cli(t, "record", "--duration", "0", "--ring-size", "64K", "--min-size", "0"); code != 2 || !strings.Contains(stderr, "-o BUNDLE is required") {
		t.Errorf("record --duration 0: exit %d, want the -o error after the flags passed; stderr:\n%s", code, lastLines(stderr, 3))
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[any]string{
		8760 * time.Hour: "8760h", time.Minute: "1m", 90 * time.Minute: "1h30m", 300 * time.Millisecond: "300ms",
		0.001: "0.001", 1e6: "1000000", 1e300: "1e+300", 1 << 20: "1048576",
	} {
		if got := formatNumber(v); got != want {
			t.Errorf("formatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}
