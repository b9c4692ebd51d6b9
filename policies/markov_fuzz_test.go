package policies

import (
	"bytes"
	"testing"
)

// FuzzLoadModel checks that Load never panics or over-allocates on
// arbitrary input, and that whatever it accepts round-trips through Save.
// Run with: go test -fuzz FuzzLoadModel ./policies
func FuzzLoadModel(f *testing.F) {
	var buf bytes.Buffer
	b := NewMarkovBuilder(4096)
	b.AddRun(0, FileKey{Path: "/bin/app", Size: 1 << 16, MtimeNS: 7}, []uint64{0, 3, 1, 3, 15})
	if err := b.Build().Save(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(MarkovMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Load(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := m.Save(&out); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(bytes.NewReader(out.Bytes())); err != nil {
			t.Fatalf("saved model does not load: %v", err)
		}
	})
}

// FuzzBuild checks that any spec string either builds a policy or returns
// an error, never panics. Run with: go test -fuzz FuzzBuild ./policies
func FuzzBuild(f *testing.F) {
	for _, s := range []string{"tree:window=8,ttl=500ms", "readahead:kb=512,folios=small", "markov:mode=random,seed=3", "oracle:n=5,scope=file", "stride:confidence=0", "tensor:chunk=", "x:y=z", ":", "tree:,,,"} {
		f.Add(s)
	}
	env := Env{Future: NewFuture(nil), Markov: NewMarkovBuilder(0).Build()}
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := Build(spec, env)
		if (p == nil) == (err == nil) {
			t.Fatalf("Build(%q) = %v, %v", spec, p, err)
		}
	})
}
