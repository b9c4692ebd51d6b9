package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Where the benchmark threads run and how often they are switched out. At
// queue depth 1 on this VM, a thread that waits on another CPU than the one
// taking the device's completion interrupt pays a cross-CPU wake-up on every
// operation; see docs/engine.md.
//
// Our worker threads count for themselves, so that no sampler runs in our
// process while they do (a goroutine that wakes up every few milliseconds
// makes sysmon retake the P of a worker blocked in a scheduler-visible
// syscall, which costs that worker): each reads its own
// /proc/PID/task/TID/sched (context switches, migrations) before and after
// the point and asks getcpu(2) which CPU it is on every cpuTallyEvery
// operations. fio's threads are sampled from outside: /proc/PID/task/TID
// schedstat (run time) and stat (last CPU) every placementTick, sched at the
// first and the last sample.

const (
	placementTick = 50 * time.Millisecond
	cpuTallyEvery = 256
)

// cpuTally counts a thread's operations by the CPU it ran on, sampled
// every cpuTallyEvery operations.
type cpuTally struct {
	n      uint64
	counts map[int]uint64
}

// tick counts one operation; call it on the thread being measured.
func (t *cpuTally) tick() {
	if t.n%cpuTallyEvery == 0 {
		var cpu uint32
		if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e == 0 {
			if t.counts == nil {
				t.counts = map[int]uint64{}
			}
			t.counts[int(cpu)]++
		}
	}
	t.n++
}

// selfPlacement sums the workers' own counts.
func selfPlacement(tallies []cpuTally, first, last []schedCounters) placement {
	p := placement{share: map[int]float64{}}
	var total float64
	for i := range tallies {
		for cpu, n := range tallies[i].counts {
			p.share[cpu] += float64(n)
			total += float64(n)
		}
		d := last[i].sub(first[i])
		p.counters.switches += d.switches
		p.counters.involuntary += d.involuntary
		p.counters.migrations += d.migrations
	}
	for cpu := range p.share {
		p.share[cpu] /= total
	}
	return p
}

// schedCounters are one thread's scheduler counters.
type schedCounters struct {
	switches, involuntary, migrations uint64
}

func (c schedCounters) sub(o schedCounters) schedCounters {
	return schedCounters{c.switches - o.switches, c.involuntary - o.involuntary, c.migrations - o.migrations}
}

// readSchedCounters parses /proc/PID/task/TID/sched (CONFIG_SCHED_DEBUG).
func readSchedCounters(pid, tid int) (schedCounters, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/sched", pid, tid))
	if err != nil {
		return schedCounters{}, err
	}
	var c schedCounters
	for _, l := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			continue
		}
		switch string(bytes.TrimSpace(k)) {
		case "nr_switches":
			c.switches = n
		case "nr_involuntary_switches":
			c.involuntary = n
		case "se.nr_migrations":
			c.migrations = n
		}
	}
	return c, nil
}

// readRunCPU returns a thread's total run time (ns, schedstat) and the CPU
// it last ran on (field 39 of stat).
func readRunCPU(pid, tid int) (runNS uint64, cpu int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, 0, fmt.Errorf("parse schedstat of thread %d: %q", tid, b)
	}
	runNS, err = strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parse schedstat of thread %d: %w", tid, err)
	}
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("parse stat of thread %d", tid)
	}
	sf := strings.Fields(string(s[i+1:]))
	// After the comm, state is field 3; processor is field 39.
	if len(sf) < 37 {
		return 0, 0, fmt.Errorf("parse stat of thread %d: %d fields", tid, len(sf))
	}
	cpu, err = strconv.Atoi(sf[36])
	if err != nil {
		return 0, 0, fmt.Errorf("parse stat of thread %d: %w", tid, err)
	}
	return runNS, cpu, nil
}

// threadTrack is what the sampler knows about one thread.
type threadTrack struct {
	first, last schedCounters  // counters at the first and the last sample
	runNS       uint64         // run time at the last sample
	total       uint64         // run time gained while sampled
	byCPU       map[int]uint64 // run time gained, by the CPU seen at the sample
}

// placementSampler samples every thread of one process (fio's).
type placementSampler struct {
	pid  int
	mu   sync.Mutex
	th   map[int]*threadTrack
	stop chan struct{}
	done chan struct{}
}

func startPlacement(pid int) *placementSampler {
	s := &placementSampler{pid: pid, th: map[int]*threadTrack{}, stop: make(chan struct{}), done: make(chan struct{})}
	s.sample(true)
	go func() {
		defer close(s.done)
		t := time.NewTicker(placementTick)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample(false)
			}
		}
	}()
	return s
}

func (s *placementSampler) threads() []int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", s.pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

func (s *placementSampler) sample(first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tid := range s.threads() {
		run, cpu, err := readRunCPU(s.pid, tid)
		if err != nil {
			continue // the thread exited
		}
		c, err := readSchedCounters(s.pid, tid)
		if err != nil {
			continue
		}
		t := s.th[tid]
		if t == nil {
			t = &threadTrack{byCPU: map[int]uint64{}}
			s.th[tid] = t
			if first {
				t.first, t.runNS = c, run
			}
			// A thread born after the first sample starts from zero.
		}
		if run > t.runNS {
			d := run - t.runNS
			t.byCPU[cpu] += d
			t.total += d
		}
		t.runNS, t.last = run, c
	}
}

// placement is what a sampler measured over the worker threads.
type placement struct {
	share    map[int]float64 // CPU -> fraction of the workers' run time
	counters schedCounters   // summed over the workers
}

// finish takes a last sample and stops the sampler. It reports the workers
// threads that ran longest (fio's job threads).
func (s *placementSampler) finish(workers int) placement {
	s.sample(false)
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := make([]*threadTrack, 0, len(s.th))
	for _, t := range s.th {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].total > ts[j].total })
	if len(ts) > workers {
		ts = ts[:workers]
	}
	var p placement
	p.share = map[int]float64{}
	var total uint64
	for _, t := range ts {
		d := t.last.sub(t.first)
		p.counters.switches += d.switches
		p.counters.involuntary += d.involuntary
		p.counters.migrations += d.migrations
		for cpu, ns := range t.byCPU {
			p.share[cpu] += float64(ns)
		}
		total += t.total
	}
	for cpu := range p.share {
		if total > 0 {
			p.share[cpu] /= float64(total)
		}
	}
	return p
}

// fill copies a placement into res: per-op counters, the CPU shares as
// text, and the share on the device's completion-interrupt CPUs.
func (p placement) fill(res *Result, irqCPUs []int) {
	if res.Ops == 0 {
		return
	}
	ops := float64(res.Ops)
	res.CtxSwitches = float64(p.counters.switches) / ops
	res.Involuntary = float64(p.counters.involuntary) / ops
	res.Migrations = float64(p.counters.migrations) / ops
	res.Placement = formatShare(p.share)
	if len(irqCPUs) > 0 {
		on := 0.0
		for _, c := range irqCPUs {
			on += p.share[c]
		}
		res.OnIRQCPU = &on
	}
}

func formatShare(share map[int]float64) string {
	cpus := make([]int, 0, len(share))
	for c := range share {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	var parts []string
	for _, c := range cpus {
		if share[c] >= 0.005 {
			parts = append(parts, fmt.Sprintf("%d:%.0f%%", c, 100*share[c]))
		}
	}
	return strings.Join(parts, " ")
}

// CompletionIRQCPUs returns the CPUs that take the completion interrupts
// of the block device holding path: the effective affinity of the device's
// MSI interrupts other than its config interrupt (virtio-blk "virtioN-req.Q",
// NVMe "nvmeNqQ"). It returns nil when they cannot be found (no PCI MSI
// device behind the disk, or /proc/irq unreadable).
func CompletionIRQCPUs(path string) []int {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return nil
	}
	return completionIRQCPUs("/sys", "/proc", unix.Major(st.Dev), unix.Minor(st.Dev))
}

func completionIRQCPUs(sys, proc string, major, minor uint32) []int {
	disk, err := filepath.EvalSymlinks(fmt.Sprintf("%s/dev/block/%d:%d", sys, major, minor))
	if err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(disk, "partition")); err == nil {
		disk = filepath.Dir(disk)
	}
	dev, err := filepath.EvalSymlinks(filepath.Join(disk, "device"))
	if err != nil {
		return nil
	}
	var irqs []string
	for d := dev; strings.HasPrefix(d, filepath.Join(sys, "devices")+"/"); d = filepath.Dir(d) {
		ents, err := os.ReadDir(filepath.Join(d, "msi_irqs"))
		if err != nil {
			continue
		}
		for _, e := range ents {
			irqs = append(irqs, e.Name())
		}
		break
	}
	names := irqNames(filepath.Join(proc, "interrupts"))
	set := map[int]bool{}
	for _, irq := range irqs {
		if strings.Contains(names[irq], "config") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, "irq", irq, "effective_affinity_list"))
		if err != nil {
			continue
		}
		cpus, err := ParseCPUList(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		for _, c := range cpus {
			set[c] = true
		}
	}
	var out []int
	for c := range set {
		out = append(out, c)
	}
	sort.Ints(out)
	return out
}

// irqNames maps IRQ numbers to their names in /proc/interrupts.
func irqNames(path string) map[string]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) > 0 {
			m[strings.TrimSpace(k)] = fs[len(fs)-1]
		}
	}
	return m
}

// ParseCPUList parses a CPU list like "0-3,6" (the kernel's and
// taskset's format) into sorted, distinct CPU numbers.
func ParseCPUList(s string) ([]int, error) {
	set := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxCPU {
			return nil, fmt.Errorf("parse CPU list %q: %q is not a CPU number in 0..%d", s, part, maxCPU-1)
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(hi)
			if err != nil || b < a || b >= maxCPU {
				return nil, fmt.Errorf("parse CPU list %q: %q is not a range of CPU numbers", s, part)
			}
		}
		for c := a; c <= b; c++ {
			set[c] = true
		}
	}
	out := make([]int, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Ints(out)
	return out, nil
}

// AutoCPUs is the pin set `bench engine --cpus auto` gives a point with
// threads workers, for ours and fio alike: the CPUs taking the completion
// interrupts of path's device first, then the other CPUs this process may
// use, the first threads of them (all when there are fewer). It returns nil
// (unpinned) when the affinity cannot be read.
func AutoCPUs(path string, threads int) []int {
	var allowed unix.CPUSet
	if unix.SchedGetaffinity(0, &allowed) != nil {
		return nil
	}
	var order []int
	seen := map[int]bool{}
	for _, c := range CompletionIRQCPUs(path) {
		if allowed.IsSet(c) && !seen[c] {
			seen[c] = true
			order = append(order, c)
		}
	}
	for c := 0; c < maxCPU; c++ {
		if allowed.IsSet(c) && !seen[c] {
			seen[c] = true
			order = append(order, c)
		}
	}
	if threads < len(order) {
		order = order[:threads]
	}
	sort.Ints(order)
	return order
}

func formatCPUList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// maxCPU bounds CPU numbers: the size of unix.CPUSet (glibc's CPU_SETSIZE).
const maxCPU = 1024
