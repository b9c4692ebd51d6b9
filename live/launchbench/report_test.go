package launchbench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestAgreementTable: the table of what /metrics said shows the pages the
// daemon's backend read ahead beside what the daemon read from storage,
// and says that effects were not counted when the daemon ran with effect
// off, rather than printing zeros for them.
func TestAgreementTable(t *testing.T) {
	var ss []Sample
	for i, n := range []float64{300, 310, 320} {
		ss = append(ss,
			Sample{Program: "gcc", Mode: ModeBaseline, Round: i, Wall: 80 * time.Millisecond, InBlock: 8 * 1000},
			Sample{Program: "gcc", Mode: ModeDaemon, Round: i, Wall: 60 * time.Millisecond, InBlock: 8 * 100,
				Metrics: &MetricsDelta{Submitted: n, Launches: 1, DaemonRead: n + 2}})
	}
	rep := &Report{Rounds: 3, Samples: ss, Rows: summarize(ss, []string{ModeBaseline, ModeDaemon}), Agree: agreement(ss)}
	var b bytes.Buffer
	rep.WriteMarkdown(&b)
	if want := "| gcc | 310 | 312 | not counted (the daemon's effect = false) | 900 | 3 / 3 |"; !strings.Contains(b.String(), want) {
		t.Errorf("effect off: want the row %q in\n%s", want, b.String())
	}
	for i := range ss {
		if m := ss[i].Metrics; m != nil {
			m.Effect, m.Prefetched, m.UsedInTime, m.Late = true, m.Submitted, m.Submitted-20, 5
		}
	}
	rep.Agree = agreement(ss)
	b.Reset()
	rep.WriteMarkdown(&b)
	if want := "| gcc | 310 | 312 | 310, 295 | 900 | 3 / 3 |"; !strings.Contains(b.String(), want) {
		t.Errorf("effect on: want the row %q in\n%s", want, b.String())
	}
}
