package hints

import (
	"errors"
	"slices"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var m Message
	b, err := AppendTreeChildEnter(nil, "/data/index.db", 7, 3, []uint64{10, 11, 40})
	if err != nil {
		t.Fatal(err)
	}
	if err := Decode(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindTreeChildEnter || string(m.Path) != "/data/index.db" || m.ParentPage != 7 || m.Position != 3 || !slices.Equal(m.Children, []uint64{10, 11, 40}) {
		t.Fatalf("tree_child_enter decoded as %+v", m)
	}
	b, _ = AppendTensorLayout(b[:0], "", "layers.0.w", 4096, 1<<20)
	if err := Decode(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindTensorLayout || m.Flags != FlagFD || m.Path != nil || string(m.Name) != "layers.0.w" || m.Offset != 4096 || m.Length != 1<<20 {
		t.Fatalf("tensor_layout decoded as %+v", m)
	}
	b, _ = AppendLayerStart(b[:0], "/m.bin", 12)
	if err := Decode(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindLayerStart || m.Layer != 12 || string(m.Path) != "/m.bin" {
		t.Fatalf("layer_start decoded as %+v", m)
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := AppendTreeChildEnter(nil, "/f", 1, 2, []uint64{3})
	var m Message
	for i := 0; i < len(good); i++ {
		if err := Decode(good[:i], &m); !errors.Is(err, ErrTruncated) {
			t.Errorf("prefix of %d bytes: got %v, want ErrTruncated", i, err)
		}
	}
	bad := slices.Clone(good)
	bad[4] = 2
	if err := Decode(bad, &m); !errors.Is(err, ErrVersion) {
		t.Errorf("version 2: got %v", err)
	}
	bad = slices.Clone(good)
	bad[0] = 'X'
	if err := Decode(bad, &m); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad magic: got %v", err)
	}
	bad = slices.Clone(good)
	bad[5] = 9
	if err := Decode(bad, &m); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown kind: got %v", err)
	}
	if err := Decode(make([]byte, MaxDatagram+1), &m); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized: got %v", err)
	}
	if _, err := AppendTreeChildEnter(nil, "/f", 0, 0, make([]uint64, MaxChildren+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("encode too many children: got %v", err)
	}
}

func TestDecodeAllocs(t *testing.T) {
	b, _ := AppendTreeChildEnter(nil, "/data/index.db", 7, 3, []uint64{10, 11, 40})
	var m Message
	_ = Decode(b, &m)
	if n := testing.AllocsPerRun(100, func() { _ = Decode(b, &m) }); n != 0 {
		t.Errorf("Decode allocates %v times per hint", n)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := AppendTreeChildEnter(nil, "/data/index.db", 7, 3, []uint64{10, 11, 40})
	f.Add(b)
	b, _ = AppendTensorLayout(nil, "", "w", 1, 2)
	f.Add(b)
	b, _ = AppendLayerStart(nil, "/m", 1)
	f.Add(b)
	f.Add(AppendDropReport(nil, 3, 4))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Message
		if err := Decode(data, &m); err != nil {
			return
		}
		// A datagram that decodes re-encodes to the same bytes.
		var out []byte
		var err error
		path := string(m.Path)
		switch m.Kind {
		case KindTreeChildEnter:
			out, err = AppendTreeChildEnter(nil, path, m.ParentPage, m.Position, m.Children)
		case KindTensorLayout:
			out, err = AppendTensorLayout(nil, path, string(m.Name), m.Offset, m.Length)
		case KindLayerStart:
			out, err = AppendLayerStart(nil, path, m.Layer)
		case KindDropReport:
			out = AppendDropReport(nil, m.QueueFull, m.NoServer)
		default:
			t.Fatalf("decoded unknown kind %d", m.Kind)
		}
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !slices.Equal(out, data) {
			t.Fatalf("re-encoded %x, want %x", out, data)
		}
	})
}
