package trace

import (
	"strings"
	"testing"
)

func TestAnonymizerPath(t *testing.T) {
	an, err := NewAnonymizer("salt")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/home/alice/db/data.sqlite",
		"/home/alice/db/wal",
		"relative/dir/file.tar.gz",
		"/home/alice/.bashrc",
		"/weird/name.with space",
		"/a/../b/./c.txt",
		"/",
		"blockdev:8,0",
	} {
		got := an.Path(p)
		in, out := strings.Split(p, "/"), strings.Split(got, "/")
		if len(in) != len(out) {
			t.Errorf("Path(%q) = %q: depth changed", p, got)
			continue
		}
		for i := range in {
			switch in[i] {
			case "", ".", "..":
				if out[i] != in[i] {
					t.Errorf("Path(%q) = %q: component %d %q not kept", p, got, i, in[i])
				}
				continue
			}
			if out[i] == in[i] || (len(in[i]) >= 4 && strings.Contains(out[i], in[i])) {
				t.Errorf("Path(%q) = %q: component %q leaked", p, got, in[i])
			}
		}
		if again := an.Path(p); again != got {
			t.Errorf("Path(%q) not deterministic: %q then %q", p, got, again)
		}
	}
	for _, tc := range []struct{ in, ext string }{
		{"/x/data.sqlite", ".sqlite"}, {"/x/file.tar.gz", ".gz"}, {"/x/.bashrc", ""},
		{"/x/name.with space", ""}, {"/x/noext", ""}, {"/x/a.verylongextension", ""},
	} {
		got := an.Path(tc.in)
		if keptExt(got[strings.LastIndex(got, "/")+1:]) != tc.ext {
			t.Errorf("Path(%q) = %q: want extension %q", tc.in, got, tc.ext)
		}
	}
	// Same directory stays the same directory; different names differ.
	a, b := an.Path("/srv/db/a.db"), an.Path("/srv/db/b.db")
	if a[:strings.LastIndex(a, "/")] != b[:strings.LastIndex(b, "/")] || a == b {
		t.Errorf("siblings %q and %q: want same parent, different names", a, b)
	}
	// Another salt gives other hashes; a random salt too.
	other, _ := NewAnonymizer("other")
	r1, _ := NewAnonymizer("")
	r2, _ := NewAnonymizer("")
	if other.Path(a) == an.Path(a) || r1.Path("/x/y") == r2.Path("/x/y") {
		t.Error("different salts gave the same hash")
	}
	if an.Path("") != "" {
		t.Error("empty path must stay empty")
	}
	c := an.Comm("postgres")
	if len(c) > 15 || strings.Contains(c, "postgres") || c != an.Comm("postgres") || an.Comm("") != "" {
		t.Errorf("Comm = %q: want a stable hash of at most 15 characters", c)
	}
}

func TestParseBound(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Bound
		bad  bool
	}{
		{"", Bound{}, false},
		{"1.5s", Bound{Set: true, NS: 1500000000}, false},
		{"250ms", Bound{Set: true, NS: 250000000}, false},
		{"123456789", Bound{Set: true, Absolute: true, NS: 123456789}, false},
		{"-1s", Bound{}, true},
		{"soon", Bound{}, true},
	} {
		got, err := ParseBound(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseBound(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
