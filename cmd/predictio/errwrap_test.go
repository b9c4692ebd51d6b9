package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
)

// doubledPrefix returns the first two segments of msg ("a: b: c") that
// start with the same two words ("open bundle: open bundle /x"; a table
// file counts as its table: "read files of /b: read files.arrow"), or "".
func doubledPrefix(msg string) string {
	seen := map[string]string{}
	for _, seg := range strings.Split(msg, ": ") {
		w := strings.Fields(seg)
		if len(w) < 2 {
			continue
		}
		key := w[0] + " " + strings.TrimSuffix(w[1], ".arrow")
		if prev, ok := seen[key]; ok {
			return prev + " ... " + seg
		}
		seen[key] = seg
	}
	return ""
}

func TestDoubledPrefix(t *testing.T) {
	for msg, want := range map[string]bool{
		"predictio: open bundle /b: open bundle: open /b/manifest.json: no such file": true,
		"predictio: read accesses.arrow: read accesses.arrow: batch 0: bad":           true,
		"predictio: anonymize: create bundle: mkdir /proc/an: no such file":           false,
		"predictio: merge: /b: read files.arrow: batch 0: bad":                        false,
		"predictio simulate: read files of /b: read files.arrow: no footer":           true,
	} {
		if got := doubledPrefix(msg) != ""; got != want {
			t.Errorf("doubledPrefix(%q) = %v, want %v", msg, got, want)
		}
	}
}

// errBundles writes a good bundle, one with 100 bytes flipped in the middle
// of accesses.arrow and one whose files.arrow is cut in half, plus a file
// that is not a model, and returns their paths.
func errBundles(t *testing.T) (good, corrupt, cut, badModel string) {
	t.Helper()
	dir := t.TempDir()
	good = filepath.Join(dir, "good")
	if err := formats.Synth(good, formats.SynthSpec{Pattern: "btree", Events: 5000, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	copyBundle := func(name string, mangle func(dir string)) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(good)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(good, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mangle(p)
		return p
	}
	rewrite := func(path string, f func([]byte) []byte) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	corrupt = copyBundle("corrupt", func(d string) {
		rewrite(filepath.Join(d, formats.AccessesFile), func(b []byte) []byte {
			// The Arrow file footer's length, which every reader checks.
			for i := len(b) - 10; i < len(b)-6; i++ {
				b[i] ^= 0xff
			}
			return b
		})
	})
	cut = copyBundle("cut", func(d string) {
		rewrite(filepath.Join(d, formats.FilesFile), func(b []byte) []byte { return b[:len(b)/2] })
	})
	badModel = filepath.Join(dir, "bad.model")
	if err := os.WriteFile(badModel, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return good, corrupt, cut, badModel
}

// TestErrorsWrapOnce runs the CLI on bad inputs (a missing bundle, a
// corrupt table, a cut table, an unwritable output, a bad model) and wants
// each failure reported with every prefix once.
func TestErrorsWrapOnce(t *testing.T) {
	good, corrupt, cut, badModel := errBundles(t)
	tmp := t.TempDir()
	out := func(name string) string { return filepath.Join(tmp, name) }
	const missing, unwritable = "/nonexistent/predictio-bundle", "/proc/predictio-out"
	// pending lists doubled prefixes known and not yet fixed, by command
	// and input ("simulate missing": "simulate/bundle.go:29 open bundle");
	// the test fails once one is fixed, so that its entry is removed here.
	pending := map[string]string{}
	type errCase struct {
		args []string
		id   string // command and input, the key of pending
	}
	var cases []errCase
	for input, b := range map[string]string{"missing": missing, "corrupt": corrupt, "cut": cut} {
		table := "accesses"
		if input == "cut" {
			table = "files"
		}
		for _, args := range [][]string{
			{"trace", "info", b},
			{"trace", "cat", b, "--table", table},
			{"trace", "export", b, "--parquet", out("pq")},
			{"trace", "anonymize", b, "-o", out("anon")},
			{"trace", "merge", "-o", out("merged"), b},
			{"trace", "slice", b, "-o", out("sliced"), "--to", "1ms"},
			{"simulate", b},
			{"train", "markov", "-o", out("m.model"), b},
			{"replay", b},
			{"replay", "materialize", b, out("files")},
		} {
			name := args[0]
			if args[0] == "trace" || args[0] == "train" || args[1] == "materialize" {
				name += " " + args[1]
			}
			cases = append(cases, errCase{args, name + " " + input})
		}
	}
	for _, args := range [][]string{
		{"trace", "synth", "-o", unwritable, "--pattern", "seq"},
		{"trace", "synth", "-o", good, "--pattern", "seq"}, // not empty
		{"trace", "export", good, "--parquet", unwritable},
		{"trace", "anonymize", good, "-o", unwritable},
		{"trace", "merge", "-o", unwritable, good},
		{"trace", "slice", good, "-o", unwritable, "--to", "1ms"},
		{"trace", "import", "--from", "fio", badModel, "-o", out("imported")},
		{"train", "markov", "-o", unwritable + "/m.model", good},
		{"replay", "materialize", good, unwritable},
		{"simulate", "--junit", unwritable + "/j.xml", good},
		{"simulate", "--model", badModel, "--policy", "markov", good},
		{"replay", "--model", badModel, "--policy", "markov", good},
	} {
		cases = append(cases, errCase{args, ""})
	}
	cases = append(cases, errCase{[]string{"record", "-o", unwritable, "--", "true"}, "record unwritable"})
	for _, c := range cases {
		_, stderr, code := cli(t, c.args...)
		if code == 0 {
			t.Errorf("%v: exit 0, want an error", c.args)
			continue
		}
		msg := firstLine(stderr)
		d := doubledPrefix(msg)
		owner, isPending := pending[c.id]
		switch {
		case d != "" && !isPending:
			t.Errorf("%v: doubled prefix %q in:\n%s", c.args, d, msg)
		case d == "" && isPending:
			t.Errorf("%v: now wraps once (%s fixed): remove %q from pending", c.args, owner, c.id)
		case d != "":
			t.Logf("%v: still doubled in %s: %s", c.args, owner, msg)
		}
	}
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "predictio") {
			return l
		}
	}
	return s
}
