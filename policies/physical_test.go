package policies

import (
	"slices"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
)

func physicalAccess(file uint32, kind formats.AccessKind, page uint64, n uint32) *Event {
	return &Event{Kind: EventFileAccess, File: file, Access: FileAccess{Kind: kind, Page: page, NPages: n}}
}

// TestPhysical checks the windows the physical policy asks for.
func TestPhysical(t *testing.T) {
	eofs := map[uint32]uint64{1: 100, 2: 0}
	p := mustBuild(t, "physical:n=4", Env{FilePages: func(f uint32) uint64 { return eofs[f] }})
	var got [][]uint64
	emit := func(r *Request) {
		if !r.Valid(DefaultMaxPages) {
			t.Fatalf("request %+v is not normalized", r)
		}
		got = append(got, pagesOf([]Request{*r}))
	}
	step := func(ev *Event, want ...uint64) {
		t.Helper()
		got = nil
		p.Handle(ev, emit)
		var flat []uint64
		for _, g := range got {
			flat = append(flat, g...)
		}
		if !slices.Equal(flat, want) {
			t.Errorf("access %+v: requested %v, want %v", ev.Access, flat, want)
		}
	}
	step(physicalAccess(1, formats.KindRead, 10, 1), 11, 12, 13, 14)
	step(physicalAccess(1, formats.KindRead, 11, 1), 15)     // 12-14 asked already
	step(physicalAccess(1, formats.KindRead, 12, 2), 16, 17) // after pages 12-13: 14-17, of which 14-15 were asked
	step(physicalAccess(1, formats.KindFault, 50, 1), 51, 52, 53, 54)
	step(physicalAccess(1, formats.KindRead, 40, 1), 41, 42, 43, 44) // backwards: a new window
	step(physicalAccess(1, formats.KindRead, 97, 1), 98, 99)         // clipped at the end of file
	step(physicalAccess(1, formats.KindRead, 99, 1))                 // nothing after the last page
	step(physicalAccess(1, formats.KindCacheAdd, 60, 1))             // not a demand access
	step(physicalAccess(2, formats.KindMap, 0, 16), 16, 17, 18, 19)  // unknown size: not clipped
	step(physicalAccess(2, formats.KindRead, 1<<64-3, 1))            // the window would wrap past the last page number
	step(physicalAccess(2, formats.KindRead, 1<<64-1, 1))
	if !p.Accepts(EventFileAccess) || p.Accepts(EventTreeChildEnter) {
		t.Error("physical accepts the wrong kinds")
	}
	if _, err := Build("physical:n=0", Env{}); err == nil || !strings.Contains(err.Error(), "n") {
		t.Errorf("n=0: %v", err)
	}
	if d := Describe("physical"); !strings.Contains(d, "figure 11") || !strings.Contains(d, "physical:n=8") {
		t.Errorf("Describe: %q", d)
	}
}
