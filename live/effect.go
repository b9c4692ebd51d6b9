package live

import (
	"github.com/predictio/predictio/effect"
)

// maxDemand bounds the demand processes the loop adds to the observer;
// past it the set is cleared (ForgetPID keeps it small in the daemon).
const maxDemand = 1 << 14

// addDemand makes pid a demand process of the observer, once.
func (l *Loop) addDemand(pid uint32) {
	l.lastPID = pid
	l.emu.Lock()
	defer l.emu.Unlock()
	if _, ok := l.demand[pid]; ok {
		return
	}
	if len(l.demand) >= maxDemand {
		for p := range l.demand {
			_ = l.cfg.Effect.RemoveDemandProcess(int(p))
		}
		clear(l.demand)
	}
	if l.cfg.Effect.AddDemandProcess(int(pid)) == nil {
		l.demand[pid] = struct{}{}
	}
}

// ForgetPID stops counting pid's lookups as demand (its launch is over).
func (l *Loop) ForgetPID(pid uint32) {
	if l.cfg.Effect == nil {
		return
	}
	l.emu.Lock()
	defer l.emu.Unlock()
	if _, ok := l.demand[pid]; ok {
		delete(l.demand, pid)
		_ = l.cfg.Effect.RemoveDemandProcess(int(pid))
	}
	if l.lastPID == pid {
		l.lastPID = 0
	}
}

// watch starts counting file id's effect, for the policy (and program)
// whose request named it first. A file watched under another id already
// stays with that one.
func (l *Loop) watch(id uint32, dev, ino uint64) {
	if l.cfg.Effect == nil {
		return
	}
	if err := l.cfg.Effect.Watch(id, dev, ino); err != nil {
		l.watchErr.Add(1)
		return
	}
	l.emu.Lock()
	l.owners[id] = owner{policy: l.cur, program: l.program}
	l.emu.Unlock()
}

// Effect is what the loop's prefetches were worth: in total, per policy
// (by name, for the files its requests named first) and per program (for
// the files a launch's prefetch named first; "" for the rest). final
// settles pages never demanded as wasted (the run is over).
type Effect struct {
	Total      effect.Counts
	Policies   map[string]effect.Counts
	Programs   map[string]effect.Counts
	Unwatched  uint64 // files not counted (watched under another id, or the observer full)
	Configured bool   // an observer was given
}

// Effect returns the counts so far (final: settled, at the end of a run).
func (l *Loop) Effect(final bool) (Effect, error) {
	e := Effect{Policies: map[string]effect.Counts{}, Programs: map[string]effect.Counts{}, Unwatched: l.watchErr.Load()}
	if l.cfg.Effect == nil {
		return e, nil
	}
	e.Configured = true
	var per map[uint32]effect.Counts
	var err error
	if final {
		e.Total, per, err = l.cfg.Effect.Final()
	} else {
		e.Total, per, err = l.cfg.Effect.Counts()
	}
	if err != nil {
		return e, err
	}
	l.emu.Lock()
	defer l.emu.Unlock()
	for id, c := range per {
		o, ok := l.owners[id]
		if !ok {
			continue // another loop's file on a shared observer
		}
		name := ""
		if o.policy != nil {
			name = o.policy.name
		}
		pc := e.Policies[name]
		pc.Add(c)
		e.Policies[name] = pc
		gc := e.Programs[o.program]
		gc.Add(c)
		e.Programs[o.program] = gc
	}
	return e, nil
}
