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
