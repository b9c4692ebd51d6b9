package adapters

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

const testdata = "../testdata/adapters"

// gunzip decompresses a testdata file into the test's temporary directory
// and returns the path.
func gunzip(t testing.TB, name, as string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, as)
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, zr); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// span is a byte range a program read.
type span struct{ off, n uint64 }

// readSpans reads an "OFFSET LENGTH" file, skipping # comments.
func readSpans(t testing.TB, name string) []span {
	t.Helper()
	var out []span
	for _, f := range readFields(t, name) {
		if len(f) != 2 {
			t.Fatalf("%s: line %q is not OFFSET LENGTH", name, strings.Join(f, " "))
		}
		off, err1 := strconv.ParseUint(f[0], 10, 64)
		n, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: bad line %q", name, strings.Join(f, " "))
		}
		out = append(out, span{off, n})
	}
	return out
}

func readFields(t testing.TB, name string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Fields(line))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// accessOf returns the FileAccess event of a read of span s of file 1.
func accessOf(s span, kind formats.AccessKind, ts uint64) policies.Event {
	first := s.off / DefaultPageSize
	last := (s.off + max(s.n, 1) - 1) / DefaultPageSize
	return policies.Event{Kind: policies.EventFileAccess, TS: ts, PID: 7, TID: 7, File: 1,
		Access: policies.FileAccess{Kind: kind, Page: first, NPages: uint32(last - first + 1)}}
}

// derived is a derived event, copied.
type derived struct {
	at      int // index of the access it was derived from
	adapter string
	ev      policies.Event
}

func (d derived) String() string {
	switch d.ev.Kind {
	case policies.EventTreeChildEnter:
		return fmt.Sprintf("%d %s tree parent=%d pos=%d children=%v", d.at, d.adapter, d.ev.Tree.ParentPage, d.ev.Tree.Position, d.ev.Tree.Children)
	case policies.EventTensorLayout:
		return fmt.Sprintf("%d %s tensor %s off=%d len=%d", d.at, d.adapter, d.ev.Tensor.Name, d.ev.Tensor.Offset, d.ev.Tensor.Length)
	}
	return fmt.Sprintf("%d %s kind %d", d.at, d.adapter, d.ev.Kind)
}

// run passes evs through a stage reading file 1 from path and returns the
// derived events.
func run(t testing.TB, cfg Config, path string, evs []policies.Event) ([]derived, *Stage) {
	t.Helper()
	s, err := NewStage(cfg, PathFiles{Path: func(f uint32) (string, bool) { return path, f == 1 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var out []derived
	for i := range evs {
		s.Process(&evs[i], func(ev *policies.Event, name string) {
			c := *ev
			c.Tree.Children = slices.Clone(ev.Tree.Children)
			out = append(out, derived{at: i, adapter: name, ev: c})
		})
	}
	return out, s
}

// readEvents turns spans into read accesses.
func readEvents(spans []span) []policies.Event {
	evs := make([]policies.Event, len(spans))
	for i, s := range spans {
		evs[i] = accessOf(s, formats.KindRead, uint64(1000*(i+1)))
	}
	return evs
}
