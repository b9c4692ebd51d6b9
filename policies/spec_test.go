package policies

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestNamesAndDescribe(t *testing.T) {
	want := []string{"launch", "markov", "oracle", "physical", "readahead", "rocksdb", "stride", "tensor", "tree"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		d := Describe(n)
		if !strings.HasPrefix(d, n+": ") {
			t.Errorf("Describe(%q) = %q", n, d)
		}
		for _, p := range registry[n].params {
			if !strings.Contains(d, p.key) || !strings.Contains(d, p.def) {
				t.Errorf("Describe(%q) lacks parameter %s default %s", n, p.key, p.def)
			}
		}
	}
	if Describe("nope") != "" {
		t.Error("Describe of an unknown policy is not empty")
	}
}

func TestBuildErrors(t *testing.T) {
	env := Env{Future: NewFuture(nil), Markov: NewMarkovBuilder(0).Build(), Launch: NewLaunchModel(),
		LaunchFile: func(uint32, *LaunchStep) (uint32, bool) { return 0, false }}
	for _, tc := range []struct {
		spec string
		want []string
	}{
		{"nope", []string{`"nope"`, "unknown policy", "valid policies: launch, markov, oracle, physical, readahead, rocksdb, stride, tensor, tree"}},
		{"", []string{"unknown policy"}},
		{"tree:windw=3", []string{`unknown parameter "windw"`, "valid keys: window, ttl"}},
		{"tree:window", []string{"not key=value", "valid keys"}},
		{"tree:window=0", []string{"window", "[1, 1048576]"}},
		{"tree:window=abc", []string{`window="abc"`, "integer"}},
		{"tree:ttl=-1s", []string{"ttl", "non-negative duration"}},
		{"tree:ttl=soon", []string{"ttl", "duration"}},
		{"markov:mode=greedy", []string{"mode", "one of det, random"}},
		{"markov:threshold=2", []string{"threshold", "[0, 1]"}},
		{"readahead:folios=huge", []string{"folios", "large, small"}},
		{"readahead:kb=1", []string{"kb", "[4, 1048576]"}},
		{"oracle:scope=world", []string{"scope", "global, file"}},
		{"stride:lookahead=-1", []string{"lookahead"}},
	} {
		_, err := Build(tc.spec, env)
		if err == nil {
			t.Errorf("Build(%q) succeeded", tc.spec)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Build(%q) error %q lacks %q", tc.spec, err, w)
			}
		}
	}
	if _, err := Build("nope", env); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("unknown policy error does not wrap ErrUnknownPolicy: %v", err)
	}
	if _, err := Build("markov", Env{}); err == nil || !strings.Contains(err.Error(), "train markov") {
		t.Errorf("markov without model: %v", err)
	}
	if _, err := Build("oracle", Env{}); err == nil || !strings.Contains(err.Error(), "future") {
		t.Errorf("oracle without future: %v", err)
	}
}

func TestBuildAllDefaults(t *testing.T) {
	env := Env{Future: NewFuture(nil), Markov: NewMarkovBuilder(0).Build(), Launch: NewLaunchModel(),
		LaunchFile: func(uint32, *LaunchStep) (uint32, bool) { return 0, false }}
	for _, n := range Names() {
		p, err := Build(n, env)
		if err != nil {
			t.Fatalf("Build(%q): %v", n, err)
		}
		accepts := 0
		for k := EventKind(1); k < numEventKinds; k++ {
			if p.Accepts(k) {
				accepts++
			}
		}
		if accepts == 0 {
			t.Errorf("%s accepts no event kind", n)
		}
	}
	ps, err := BuildAll([]string{"tree:window=4,ttl=10ms", " tensor:chunk=8 ", "readahead:kb=512,folios=small", "stride:confidence=3,lookahead=2", "oracle:n=5,scope=file", "markov:mode=random,seed=9,depth=3,threshold=0"}, env)
	if err != nil || len(ps) != 6 {
		t.Fatalf("BuildAll: %v", err)
	}
	if tp := ps[0].(*treePolicy); tp.window != 4 || tp.ttl != 10e6 {
		t.Errorf("tree params not applied: %+v", tp)
	}
	if SpecName("tree:window=4") != "tree" {
		t.Error("SpecName")
	}
}

// TestDocsListParameters keeps docs/policies.md in step with the
// registry: every parameter has a row with its default.
func TestDocsListParameters(t *testing.T) {
	b, err := os.ReadFile("../docs/policies.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, n := range Names() {
		if !strings.Contains(doc, "| `"+n+"` |") {
			t.Errorf("docs/policies.md has no row for policy %s", n)
		}
		for _, p := range registry[n].params {
			if !strings.Contains(doc, "| `"+p.key+"` | `"+p.def+"` |") {
				t.Errorf("docs/policies.md has no row for %s parameter %s with default %s", n, p.key, p.def)
			}
		}
	}
}

func TestDescribeExamplesBuild(t *testing.T) {
	env := Env{Future: NewFuture(nil), Markov: NewMarkovBuilder(0).Build(), Launch: NewLaunchModel(),
		LaunchFile: func(uint32, *LaunchStep) (uint32, bool) { return 0, false }}
	for _, n := range Names() {
		ex := registry[n].example
		if ex == "" || !strings.Contains(Describe(n), "example: "+ex) {
			t.Errorf("%s: no example in Describe", n)
		}
		if _, err := Build(ex, env); err != nil {
			t.Errorf("example %q does not build: %v", ex, err)
		}
	}
}
