package live

import (
	"errors"
	"os"
	"testing"

	"github.com/predictio/predictio/effect"
	"github.com/predictio/predictio/internal/tracetest"
	"github.com/predictio/predictio/policies"
)

// TestExecDemandOnlyWhenRequested: Loop.Exec makes a process a demand
// process of the effect observer (whose read hooks then cost its every
// read) only when the policies requested something for its launch: an
// exec of a program without a profile costs nothing.
func TestExecDemandOnlyWhenRequested(t *testing.T) {
	ob, err := effect.NewObserver(effect.Options{LazyReads: true})
	if errors.Is(err, effect.ErrPermission) && os.Geteuid() != 0 {
		t.Skipf("needs CAP_BPF and CAP_PERFMON (run as root): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	dir := tracetest.DiskDir(t)
	cold := tracetest.ColdFile(t, dir, 256<<10)
	model := policies.NewLaunchModel(profileOf(t, "/x/cold", cold))
	l, err := New(Config{Policies: []string{"launch"}, Launch: model, Effect: ob}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		program string
		want    bool
	}{
		{"/x/none", false}, // no profile: nothing requested
		{"/x/cold", true},
	} {
		// A process of root's to prefetch for (the checks run as it).
		p := sleeper(t, 0, 0)
		c := struct {
			program string
			pid     uint32
			want    bool
		}{c.program, uint32(p.Process.Pid), c.want}
		got := l.Exec(c.pid, c.program, 0, 1)
		l.emu.Lock()
		_, demand := l.demand[c.pid]
		l.emu.Unlock()
		if got != c.want || demand != c.want {
			t.Errorf("exec of %s: requested %v, demand process %v; want %v", c.program, got, demand, c.want)
		}
	}
}
