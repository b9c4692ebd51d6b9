package replay

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

// TestKindFidelity: each run compares, per kind of operation, the recorded
// service and think times (summed exactly from the bundle) with the
// replayed ones; a replay never waits less than the recorded think time,
// and the text report prints the baseline's comparison.
func TestKindFidelity(t *testing.T) {
	files := []formats.File{
		{ID: 1, Dev: 1, Ino: 1, Path: "/d/a.bin", Size: 64 * 4096, MtimeNS: mtime, Mode: formats.ModeRegular | 0o644},
	}
	us := uint64(time.Microsecond)
	var rows []formats.Access
	var readService, readThink, statService, statThink uint64
	ts := uint64(time.Second)
	var prevEnd uint64
	for i := 0; i < 30; i++ {
		think, service := uint64(20+i)*us, uint64(5+i%3)*us
		if i > 0 {
			ts = prevEnd + think
		}
		a := formats.Access{TS: ts, EndNS: ts + service, TID: 1, PID: 1, FileID: 1, Op: uint64(i + 1)}
		if i%3 == 2 {
			a.Kind, a.Ret = formats.KindStat, 0
			statService += service
			if i > 0 {
				statThink += think
			}
		} else {
			a.Kind, a.FirstPage, a.NPages, a.Ret = formats.KindRead, uint64(i), 1, 4096
			readService += service
			if i > 0 {
				readThink += think
			}
		}
		rows = append(rows, a)
		prevEnd = a.EndNS
	}
	bundle, root := bundle11(t, files, rows, true)
	rep := replayBundle(t, bundle, Options{Root: root, Backend: BackendNone, Repeat: 3})
	for _, run := range append(slices.Clone(rep.Runs), &Run{Fidelity: rep.Summary.Fidelity}) {
		fs := run.Fidelity
		if len(fs) != 2 || fs[0].Kind != "read" || fs[1].Kind != "stat" {
			t.Fatalf("fidelity %+v; want a read and a stat row", fs)
		}
		rd, st := fs[0], fs[1]
		if rd.Ops != 20 || st.Ops != 10 {
			t.Fatalf("ops %d reads, %d stats; want 20 and 10", rd.Ops, st.Ops)
		}
		if rd.RecordedServiceNS != int64(readService) || rd.RecordedThinkNS != int64(readThink) ||
			st.RecordedServiceNS != int64(statService) || st.RecordedThinkNS != int64(statThink) {
			t.Fatalf("recorded: reads %+v (want service %d, think %d), stats %+v (want %d, %d)", rd, readService, readThink, st, statService, statThink)
		}
		for _, f := range fs {
			if f.ServiceNS <= 0 || f.WaitNS < f.RecordedThinkNS {
				t.Errorf("%s: replayed service %d ns, waited %d ns for a recorded think time of %d ns: a wait ended early", f.Kind, f.ServiceNS, f.WaitNS, f.RecordedThinkNS)
			}
		}
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	statRow := false
	for _, line := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "stat" && f[1] == "10" {
			statRow = true
		}
	}
	if !strings.Contains(b.String(), "Recorded against replayed, per kind") || !statRow {
		t.Errorf("text report lacks the per-kind comparison:\n%s", b.String())
	}
}

// TestWaitsEndOnTime: a replayed think time ends when it is due, not late
// by the kernel's wake-up latency (5–20 µs from clock_nanosleep on this
// kind of VM), which would be added to each of a program's thousands of
// operations; and never before it is due.
func TestWaitsEndOnTime(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		clockThread()
		for _, d := range []time.Duration{3 * time.Microsecond, 10 * time.Microsecond, 40 * time.Microsecond, 300 * time.Microsecond} {
			const n = 201
			late := make([]time.Duration, 0, n)
			for i := 0; i < n; i++ {
				due := time.Now().Add(d)
				sleepUntil(due)
				late = append(late, time.Since(due))
			}
			slices.Sort(late)
			t.Logf("waits of %v: late by %v (median), %v (90th percentile)", d, late[n/2], late[n*9/10])
			if late[0] < 0 {
				t.Errorf("a wait of %v ended %v early", d, -late[0])
			}
			// The median is what every operation pays; a loaded
			// machine's preemptions only reach the tail.
			if late[n/2] > 2*time.Microsecond {
				t.Errorf("waits of %v end %v late (median); want under 2 µs", d, late[n/2])
			}
		}
	}()
	<-done
}
