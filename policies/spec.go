package policies

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultPageSize is the page size assumed when Env.PageSize is zero.
const DefaultPageSize = 4096

// DefaultMaxPages is the chunk bound of normalized requests when
// Env.MaxPages is zero: 256 pages, 1 MiB with 4 KiB pages.
const DefaultMaxPages = 256

// ErrUnknownPolicy is returned by Build for a policy name that is not
// registered.
var ErrUnknownPolicy = errors.New("unknown policy")

// Env is what policies may know about their surroundings. Every field is
// optional; a policy that needs a missing field fails in Build with an error
// that says which one.
type Env struct {
	// PageSize is the page size in bytes; 0 means DefaultPageSize.
	PageSize int
	// MaxPages bounds the pages of one normalized request; 0 means
	// DefaultMaxPages.
	MaxPages uint32
	// FilePages returns the end of file in pages (ceil(size/PageSize)),
	// or 0 when unknown. Policies never emit pages at or beyond it.
	FilePages func(file uint32) uint64
	// FileKey returns the identity of a file, used to look up trained
	// models. ok is false when the file is unknown.
	FileKey func(file uint32) (key FileKey, ok bool)
	// Future is the oracle's knowledge of what will be accessed.
	Future *Future
	// Markov is the trained history model of the markov policy.
	Markov *MarkovModel
	// Launch holds the launch profiles of the launch policy (its spec's
	// profile= parameter loads them otherwise).
	Launch *LaunchModel
	// LaunchFile returns the file id under which the launch policy names
	// the file of a profile's step in its requests (a bundle's file of
	// that path and identity; the live runtime registers the file with
	// its backend after checking that it is unchanged and that process
	// pid may read it), or false to skip the step.
	LaunchFile func(pid uint32, s *LaunchStep) (uint32, bool)
	// FileRA returns the readahead parameters of a file's device and
	// filesystem (read_ahead_kb, max_sectors_kb, large folios), e.g. from
	// sysfs for the file's path on this machine. The readahead model uses
	// them for every parameter its spec leaves at auto; nil or zero fields
	// mean unknown.
	FileRA func(file uint32) RAParams
	// Kernel is the release of the kernel whose behaviour a policy models,
	// e.g. a bundle's host.kernel_release ("6.1.0-57-cloud-amd64"); the
	// readahead model follows its 6.1, 6.12 or 6.18 code. "" means the
	// running kernel.
	Kernel string
	// Resident reports whether a page is in the page cache. The readahead
	// model uses it to decide between a cache hit and a miss; when nil it
	// assumes every page it (or a demand access) brought in stays cached.
	Resident func(file uint32, page uint64) bool
	// Warn receives warnings, e.g. a model for a file that changed since
	// training. nil drops them.
	Warn func(msg string)
}

func (e *Env) pageSize() uint64 {
	if e.PageSize <= 0 {
		return DefaultPageSize
	}
	return uint64(e.PageSize)
}

func (e *Env) maxPages() uint32 {
	if e.MaxPages == 0 {
		return DefaultMaxPages
	}
	return e.MaxPages
}

func (e *Env) eof(file uint32) uint64 {
	if e.FilePages == nil {
		return 0
	}
	return e.FilePages(file)
}

func (e *Env) warn(format string, args ...any) {
	if e.Warn != nil {
		e.Warn(fmt.Sprintf(format, args...))
	}
}

// param is one key of a policy spec.
type param struct {
	key, def, doc string
}

type factory struct {
	doc     string
	example string
	params  []param
	build   func(a *args, env Env) (Policy, error)
}

var registry = map[string]*factory{}

func register(name string, f *factory) { registry[name] = f }

// Names returns the registered policy names, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Describe returns a human-readable description of policy name: what it
// does, its parameters and their defaults. It returns "" for an unknown
// name.
func Describe(name string) string {
	f, ok := registry[name]
	if !ok {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", name, f.doc)
	for _, p := range f.params {
		fmt.Fprintf(&b, "  %-10s default %-8s %s\n", p.key, p.def, p.doc)
	}
	if f.example != "" {
		fmt.Fprintf(&b, "  example: %s\n", f.example)
	}
	return b.String()
}

// Build constructs a policy from a spec "name[:key=value,...]", for example
// "tree:window=8,ttl=500ms". Unknown names, unknown keys and bad values are
// errors that list the valid choices.
func Build(spec string, env Env) (Policy, error) {
	name, rest, _ := strings.Cut(strings.TrimSpace(spec), ":")
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("build policy %q: %w; valid policies: %s", name, ErrUnknownPolicy, strings.Join(Names(), ", "))
	}
	a := &args{policy: name, vals: map[string]string{}}
	for _, p := range f.params {
		a.vals[p.key] = p.def
	}
	if rest != "" {
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("build policy %q: parameter %q is not key=value; valid keys: %s", name, kv, f.keys())
			}
			if _, known := a.vals[k]; !known {
				return nil, fmt.Errorf("build policy %q: unknown parameter %q; valid keys: %s", name, k, f.keys())
			}
			a.vals[k] = strings.TrimSpace(v)
		}
	}
	p, err := f.build(a, env)
	if err != nil {
		return nil, err
	}
	if a.err != nil {
		return nil, a.err
	}
	return p, nil
}

// BuildAll builds one policy per spec.
func BuildAll(specs []string, env Env) ([]Policy, error) {
	ps := make([]Policy, 0, len(specs))
	for _, s := range specs {
		p, err := Build(s, env)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// SpecName returns the policy name of a spec.
func SpecName(spec string) string {
	name, _, _ := strings.Cut(strings.TrimSpace(spec), ":")
	return name
}

func (f *factory) keys() string {
	if len(f.params) == 0 {
		return "(none)"
	}
	ks := make([]string, len(f.params))
	for i, p := range f.params {
		ks[i] = p.key
	}
	return strings.Join(ks, ", ")
}

// args holds parsed spec values; the first conversion error sticks.
type args struct {
	policy string
	vals   map[string]string
	err    error
}

func (a *args) fail(key, want string, err error) {
	if a.err == nil {
		a.err = fmt.Errorf("build policy %q: parameter %s=%q: want %s: %v", a.policy, key, a.vals[key], want, err)
	}
}

func (a *args) uint(key string, min, max uint64) uint64 {
	v, err := strconv.ParseUint(a.vals[key], 10, 64)
	if err == nil && (v < min || v > max) {
		err = fmt.Errorf("out of range [%d, %d]", min, max)
	}
	if err != nil {
		a.fail(key, fmt.Sprintf("an integer in [%d, %d]", min, max), err)
	}
	return v
}

func (a *args) float(key string, min, max float64) float64 {
	v, err := strconv.ParseFloat(a.vals[key], 64)
	if err == nil && (v < min || v > max || v != v) {
		err = fmt.Errorf("out of range [%g, %g]", min, max)
	}
	if err != nil {
		a.fail(key, fmt.Sprintf("a number in [%g, %g]", min, max), err)
	}
	return v
}

func (a *args) duration(key string) time.Duration {
	v, err := time.ParseDuration(a.vals[key])
	if err == nil && v < 0 {
		err = errors.New("negative")
	}
	if err != nil {
		a.fail(key, "a non-negative duration such as 500ms or 2s", err)
	}
	return v
}

func (a *args) choice(key string, valid ...string) string {
	v := a.vals[key]
	for _, c := range valid {
		if v == c {
			return v
		}
	}
	a.fail(key, "one of "+strings.Join(valid, ", "), errors.New("invalid choice"))
	return valid[0]
}
