package replay

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// checkGain checks that the policy runs lowered the baseline's demand
// stall by at least a third (medians over the rounds) and that at least
// half the distinct demanded pages were prefetched and used in time. A
// backend that does nothing fails it.
func checkGain(rep *Report, distinct uint64) error {
	var bstall, pstall, used []float64
	for _, r := range rep.Runs {
		if r.EffectNote != "" {
			return fmt.Errorf("run %s/%d has no counts by effect: %s", r.Policy, r.Round, r.EffectNote)
		}
		if r.Policy == Baseline {
			bstall = append(bstall, float64(r.StallNS))
			continue
		}
		pstall = append(pstall, float64(r.StallNS))
		used = append(used, float64(r.UsedInTime))
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	b, p, u := med(bstall), med(pstall), med(used)
	if p > b*2/3 {
		return fmt.Errorf("median stall %v with the policy against %v without: not a third lower", time.Duration(p), time.Duration(b))
	}
	if u < float64(distinct)/2 {
		return fmt.Errorf("median %v of %d distinct demanded pages used in time: fewer than half", u, distinct)
	}
	return nil
}

// TestOracleReducesStall: on a cold replay of scattered reads with think
// time, the oracle lowers the demand stall against the baseline, with the
// kernel backend (pages used in time counted from the page cache with
// eBPF) and with the direct backend; the same oracle on a backend that
// does nothing (none) must fail the same check.
func TestOracleReducesStall(t *testing.T) {
	tr := memTrace(8192, sparseRuns(8192, 1500, 5), 30_000)
	root := materialized(t, tr)
	distinct := distinctPages(tr)
	for _, tc := range []struct {
		backend  string
		mustFail bool
	}{
		{BackendKernel, false},
		{BackendDirect, false},
		{BackendNone, true},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			rep := replayMem(t, tr, Options{Effect: EffectInline, Root: root, Backend: tc.backend, CachePages: 16384, Runs: []string{Baseline, "oracle:n=256"}, Repeat: 3})
			for _, r := range rep.Runs {
				t.Logf("%s round %d on %s: stall %v, wall %v, %v", r.Policy, r.Round, r.Backend, time.Duration(r.StallNS), time.Duration(r.WallNS), r.Counts)
			}
			err := checkGain(rep, distinct)
			switch {
			case tc.mustFail && err == nil:
				t.Fatalf("a backend that does nothing passed the gain check")
			case !tc.mustFail && err != nil:
				t.Fatal(err)
			}
			t.Logf("gain check: %v", err)
		})
	}
}
