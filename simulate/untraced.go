package simulate

import (
	"errors"
	"fmt"
	"sort"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// MaxUntracedRows bounds the rows UntracedEvents holds in memory (192
// bytes each as events: 3 GiB at the bound).
const MaxUntracedRows = 16 << 20

// ErrNoTracerCost is returned by UntracedEvents for a bundle that holds no
// recorder cost to take out.
var ErrNoTracerCost = errors.New("the bundle has no recorder cost to take out")

// UntracedEvents returns the bundle's events with the recorder's own cost
// taken out of the think times (formats.Untracer, format 1.2: each
// thread's rows move earlier by the cost so far), in timestamp order with
// a hint before an access of the same time, as Source streams them; and
// the cost taken out, summed over the threads. Since threads shift by
// different amounts, their order changes, so the events are read into
// memory: at most MaxUntracedRows rows. A bundle whose rows carry no cost
// (recorded before format 1.2, or imported) gets ErrNoTracerCost.
func (in *Input) UntracedEvents() ([]policies.Event, uint64, error) {
	if in.known != nil {
		if err := in.Bundle.CheckReferences(); err != nil {
			return nil, 0, err
		}
	}
	un := formats.NewUntracer(in.Bundle.Manifest().Recording.SyscallCostNS, 0)
	hc, err := in.Bundle.Hints()
	if err != nil {
		return nil, 0, fmt.Errorf("read hints of %s: %w", in.Dir, err)
	}
	defer hc.Close()
	// Hints first, so that the stable sort below keeps a hint before an
	// access of the same time; their times move once every row has.
	var evs []policies.Event
	var hintTIDs []uint32 // of evs[:len(hintTIDs)]
	tooMany := func(table string) error {
		return fmt.Errorf("untraced events of %s: %s: more than the %d rows --untraced reads into memory", in.Dir, table, MaxUntracedRows)
	}
	for hc.Next() {
		if len(evs) == MaxUntracedRows {
			return nil, 0, tooMany(formats.HintsFile)
		}
		h := *hc.At()
		h.Children = append([]uint64(nil), h.Children...)
		var ev policies.Event
		if ev.FromHint(&h) {
			evs = append(evs, ev)
			hintTIDs = append(hintTIDs, h.TID)
		}
	}
	if err := hc.Err(); err != nil {
		return nil, 0, fmt.Errorf("read hints of %s: %w", in.Dir, err)
	}
	cur, err := in.Bundle.Accesses()
	if err != nil {
		return nil, 0, fmt.Errorf("read accesses of %s: %w", in.Dir, err)
	}
	defer cur.Close()
	for cur.Next() {
		if len(evs) == MaxUntracedRows {
			return nil, 0, tooMany(formats.AccessesFile)
		}
		a := *cur.At()
		un.Row(&a)
		var ev policies.Event
		ev.FromAccess(&a)
		evs = append(evs, ev)
	}
	if err := cur.Err(); err != nil {
		return nil, 0, fmt.Errorf("read accesses of %s: %w", in.Dir, err)
	}
	if un.Total() == 0 {
		return nil, 0, fmt.Errorf("untraced events of %s: %w (tracer_ns and tracer_calls, format 1.2, written by predictio record since 2026-12-06)", in.Dir, ErrNoTracerCost)
	}
	for i, tid := range hintTIDs {
		evs[i].TS = un.At(tid, evs[i].TS)
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].TS < evs[j].TS })
	return evs, un.Total(), nil
}
