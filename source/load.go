package source

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/predictio/predictio/bpf"
)

// loadPlan is what Open loads and attaches.
type loadPlan struct {
	spec   *ebpf.CollectionSpec
	attach []probe
	kernel *btf.Spec // CO-RE targets; nil: the whole kernel BTF
}

// plan probes the kernel's tracepoints (and kprobes where a tracepoint is
// missing) and drops the programs that will not be attached, so the
// verifier only sees what runs.
func (s *Source) plan(events string) (*loadPlan, error) {
	var spec *ebpf.CollectionSpec
	var err error
	if s.cfg.object != "" {
		spec, err = ebpf.LoadCollectionSpec(s.cfg.object)
	} else {
		spec, err = bpf.LoadRecord()
	}
	if err != nil {
		return nil, fmt.Errorf("load bpf spec: %w", err)
	}
	attach, missing, err := probeAccessSources(events, kprobeFuncs(events))
	if err != nil {
		return nil, err
	}
	s.missing = missing
	for _, a := range accessSources {
		keepTP, keepKP := false, false
		for _, p := range attach {
			if p.name == a.name {
				keepTP, keepKP = !p.viaKprobe, p.viaKprobe
			}
		}
		if !keepTP {
			delete(spec.Programs, a.prog)
		}
		if a.kprobeProg != "" && !keepKP {
			delete(spec.Programs, a.kprobeProg)
		}
	}
	helpers := helperSources
	if s.cfg.Exec != ExecNone {
		helpers = append(helpers[:len(helpers):len(helpers)], execSource)
	} else {
		delete(spec.Programs, execSource.prog)
	}
	used := make(map[string]bool)
	for _, h := range helpers {
		if tracepointExists(events, h.group, h.name) {
			attach = append(attach, h)
			used[h.prog] = true
		}
	}
	for _, h := range helpers { // one program may serve two tracepoints
		if !used[h.prog] {
			delete(spec.Programs, h.prog)
		}
	}
	return &loadPlan{spec: spec, attach: attach}, nil
}

// kernelTypes finds the kernel types the programs' CO-RE relocations are
// resolved against: the cached pruned copy (btfcache.go), or the whole
// kernel BTF.
func (s *Source) kernelTypes(p *loadPlan) error {
	if len(p.spec.Programs) == 0 {
		return nil
	}
	dir := s.cfg.BTFCacheDir
	if dir == "" {
		dir = DefaultBTFCacheDir
	}
	if s.cfg.NoBTFCache {
		dir = ""
	}
	kt, from, err := kernelTypes(p.spec.Types, dir)
	if err != nil {
		return fmt.Errorf("load kernel BTF (CONFIG_DEBUG_INFO_BTF): %w", err)
	}
	s.btf, p.kernel = from, kt
	return nil
}

// load sets the programs' constants and loads maps and programs.
func (s *Source) load(p *loadPlan) error {
	spec := p.spec
	ring := s.cfg.RingBytes
	if ring == 0 {
		ring = 16 << 20
	}
	spec.Maps[bpf.RecordMapEvents].MaxEntries = uint32(ring)
	// The deny set holds the files a filter excludes once resolved: many
	// for --all, few for a command or processes. Full, the kernel just
	// lets more events through to the user-space filter.
	if !s.cfg.All {
		spec.Maps[bpf.RecordMapFiles].MaxEntries = 16384
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count possible CPUs: %w", err)
	}
	if m := spec.Maps[bpf.RecordMapInread]; m != nil {
		m.MaxEntries = uint32(cpus)
	}
	wake := uint64(256 << 10)
	if wake > uint64(ring)/4 {
		wake = uint64(ring) / 4
	}
	if s.cfg.Latency == LowLatency {
		wake = 0
	}
	self := uint32(os.Getpid())
	for name, v := range map[string]any{
		"comm_filter":  uint8(min(len(s.cfg.Comm), 1)),
		"self_tgid":    self,
		"wakeup_bytes": wake,
		// What all CPUs add between two samples of one: queryEvery
		// records each (bpf/record.h, submit).
		"wake_window": uint64(queryEvery * cpus * (8 + eventSize)),
	} {
		if spec.Variables[name] == nil && s.cfg.object != "" {
			continue // an older object, for comparison
		}
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set bpf variable %s: %w", name, err)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(mapsOnly(spec), ebpf.CollectionOptions{})
	if err != nil {
		return fmt.Errorf("load bpf maps: %w", err)
	}
	s.coll = coll
	if err := loadPrograms(spec, coll, p.kernel); err != nil {
		return err
	}
	for _, c := range s.cfg.Comm {
		var k [16]byte
		copy(k[:], c)
		if err := coll.Maps[bpf.RecordMapComms].Put(k, uint8(1)); err != nil {
			return fmt.Errorf("set comm filter %q: %w", c, err)
		}
	}
	return nil
}

// mapsOnly is spec without its programs.
func mapsOnly(spec *ebpf.CollectionSpec) *ebpf.CollectionSpec {
	m := spec.Copy()
	m.Programs = nil
	return m
}

// loadPrograms loads spec's programs, using coll's maps, into coll. They
// load in two halves at once: the kernel verifies a program on the thread
// that loads it, and with two CPUs that halves the wait.
func loadPrograms(spec *ebpf.CollectionSpec, coll *ebpf.Collection, kernel *btf.Spec) error {
	names := make([]string, 0, len(spec.Programs))
	for n := range spec.Programs {
		names = append(names, n)
	}
	// Balance the halves by size: big first, each to the lighter half.
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Compare(len(spec.Programs[b].Instructions), len(spec.Programs[a].Instructions))
	})
	var half [2][]string
	var size [2]int
	for _, n := range names {
		i := 0
		if size[1] < size[0] {
			i = 1
		}
		half[i] = append(half[i], n)
		size[i] += len(spec.Programs[n].Instructions)
	}
	var (
		wg    sync.WaitGroup
		subs  [2]*ebpf.Collection
		errs  [2]error
		repls = coll.Maps
	)
	for i := range half {
		if len(half[i]) == 0 {
			continue
		}
		sub := spec.Copy()
		for n := range sub.Programs {
			if !slices.Contains(half[i], n) {
				delete(sub.Programs, n)
			}
		}
		// The data sections were made mmapable (and .rodata frozen) when
		// created; a replacement must say so.
		for n, m := range repls {
			sub.Maps[n].Flags = m.Flags()
		}
		kt := kernel
		if kt != nil {
			kt = kt.Copy()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			subs[i], errs[i] = ebpf.NewCollectionWithOptions(sub, ebpf.CollectionOptions{
				MapReplacements: repls, Programs: ebpf.ProgramOptions{KernelTypes: kt},
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		for _, c := range subs {
			if c != nil {
				c.Close()
			}
		}
		return fmt.Errorf("load bpf programs: %w", err)
	}
	coll.Programs = make(map[string]*ebpf.Program, len(names))
	for i, c := range subs {
		if c == nil {
			continue
		}
		for _, n := range half[i] {
			coll.Programs[n] = c.DetachProgram(n)
		}
		c.Close()
	}
	return nil
}

// openRings opens the readers of the events and opens rings.
func (s *Source) openRings() error {
	var err error
	events, opens := ringPolled, ringPolled
	if s.cfg.Latency == LowLatency {
		events, opens = ringBlocking, ringBlocking
		if v := s.coll.Variables["reader_polling"]; v != nil {
			events = ringAdaptive
		}
	}
	if s.events, err = newRing(s.coll.Maps[bpf.RecordMapEvents], events, s.setPolling); err != nil {
		return fmt.Errorf("open events ring: %w", err)
	}
	if s.opens, err = newRing(s.coll.Maps[bpf.RecordMapOpens], opens, nil); err != nil {
		return fmt.Errorf("open opens ring: %w", err)
	}
	return nil
}

// setPolling sets the programs' reader_polling flag (bpf/record.h): while
// it is set they submit events without waking the reader.
func (s *Source) setPolling(on bool) error {
	v := uint32(0)
	if on {
		v = 1
	}
	if err := s.coll.Variables["reader_polling"].Set(v); err != nil {
		return fmt.Errorf("set reader_polling: %w", err)
	}
	return nil
}

// attach attaches the planned programs: raw tracepoints, or kprobes where
// a kind falls back to one. An access kind that fails to attach fails
// Open; a helper is optional.
func (s *Source) attach(p *loadPlan) error {
	s.loaded = p
	for _, a := range p.attach {
		l, err := s.attachOne(a)
		if err != nil {
			if a.kind != 0 {
				return fmt.Errorf("attach %s: %w", a, err)
			}
			s.notes = append(s.notes, fmt.Sprintf("source: cannot attach %s (%v)", a, err))
			continue
		}
		if l == nil {
			continue
		}
		s.links = append(s.links, attached{probe: a, link: l})
		s.sources = append(s.sources, a.String())
	}
	return nil
}

// attached is a probe and its link (nil while paused).
type attached struct {
	probe probe
	link  link.Link
}

// always reports whether a probe stays attached while tracing is paused:
// those that keep the pid set and exec events going.
func (a attached) always() bool {
	return a.probe.name == "sched_process_fork" || a.probe.name == "sched_process_exit" || a.probe.name == execSource.name
}

func (s *Source) attachOne(a probe) (link.Link, error) {
	name := a.prog
	if a.viaKprobe {
		name = a.kprobeProg
	}
	prog := s.coll.Programs[name]
	if prog == nil {
		return nil, nil
	}
	if a.viaKprobe {
		return link.Kprobe(a.kprobe, prog, nil)
	}
	return link.AttachRawTracepoint(link.RawTracepointOptions{Name: a.name, Program: prog})
}

// Pause detaches every program but those following processes (fork,
// exit) and reporting execs, so that tracing costs the system nothing
// but those while there is nothing to trace (a daemon between launches:
// the sys_enter and sys_exit programs otherwise run for every system call
// of every task). Targets keep being followed; their accesses are not
// traced until Resume. Raw tracepoints attach and detach in microseconds.
func (s *Source) Pause() error {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed {
		return fmt.Errorf("pause tracing: %w", ErrStopped)
	}
	var wg sync.WaitGroup
	for i := range s.links {
		a := &s.links[i]
		if a.always() || a.link == nil {
			continue
		}
		wg.Add(1)
		go func(l link.Link) { defer wg.Done(); l.Close() }(a.link)
		a.link = nil
	}
	wg.Wait()
	s.paused.Store(true)
	s.wakeReaders()
	return nil
}

// wakeReaders has the ring readers hand on what they hold, and pollTicks
// stop or restart its ticks (Pause, Resume).
func (s *Source) wakeReaders() {
	if s.events != nil && s.state == 1 {
		s.events.Flush()
		s.flushOpens()
		select {
		case s.pauses <- struct{}{}:
		default:
		}
	}
}

// Resume re-attaches what Pause detached.
func (s *Source) Resume() error {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closed {
		return fmt.Errorf("resume tracing: %w", ErrStopped)
	}
	for i := range s.links {
		a := &s.links[i]
		if a.link != nil {
			continue
		}
		l, err := s.attachOne(a.probe)
		if err != nil {
			return fmt.Errorf("resume tracing: attach %s: %w", a.probe, err)
		}
		a.link = l
	}
	if s.paused.Swap(false) {
		s.wakeReaders()
	}
	return nil
}

// filter builds the path and size filters of the config.
func (s *Source) filter() filter {
	f := filter{include: s.cfg.Include, minSize: s.cfg.MinSize}
	f.exclude = append(append([]string{}, defaultExcludes...), s.cfg.Exclude...)
	return f
}

// Excludes returns the path prefixes files are excluded by: /proc, /sys,
// /dev and Config.Exclude.
func (s *Source) Excludes() []string { return s.filter().exclude }

func cwd() string {
	d, _ := os.Getwd()
	return filepath.Clean(d)
}
