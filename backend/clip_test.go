package backend

import (
	"testing"

	"github.com/predictio/predictio/policies"
)

func TestClipEOF(t *testing.T) {
	for _, c := range []struct {
		r      policies.Range
		eof    uint64
		n      uint64
		inside bool
	}{
		{policies.Range{First: 0, N: 4}, 10, 4, true},
		{policies.Range{First: 8, N: 4}, 10, 2, true},
		{policies.Range{First: 10, N: 4}, 10, 0, false},
		{policies.Range{First: 12, N: 1}, 10, 0, false},
		{policies.Range{First: 9, N: 0}, 10, 0, true},
		{policies.Range{First: 6, N: 4}, 10, 4, true},
	} {
		n, ok := ClipEOF(c.r, c.eof)
		if n != c.n || ok != c.inside {
			t.Errorf("ClipEOF(%+v, %d) = %d, %v; want %d, %v", c.r, c.eof, n, ok, c.n, c.inside)
		}
	}
	if got := pagesOf(4097, 4096); got != 2 {
		t.Errorf("pages of 4097 bytes = %d, want 2", got)
	}
}
