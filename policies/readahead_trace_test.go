package policies

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// This file captures the kernel's readahead decisions for the validation
// in readahead_kernel_test.go: from the readahead and filemap tracepoints
// where the kernel has them (Linux 6.18), else from kprobes on the
// functions they sit in (6.1, 6.12; the offsets of the fields they read
// come from the kernel's BTF), in a tracefs instance of the test's own,
// filtered by the test file's inode and device.

const tracefsRoot = "/sys/kernel/tracing"

// Canonical event names.
const (
	evSync   = "sync"   // page_cache_sync_ra entry: index, req_count, ra_pages, mmap_miss
	evAsync  = "async"  // page_cache_async_ra entry: the same
	evOrder  = "order"  // page_cache_ra_order entry: index, size, async_size
	evFault  = "fault"  // filemap_fault: index (page); flags with the kprobe
	evMap    = "map"    // filemap_map_pages: index, last (pages)
	evLookup = "lookup" // filemap_get_pages success: index, last (pages)
	evDelete = "delete" // a folio of the file left the page cache
	evUFault = "ufault" // a user page fault of the test's thread (x86 exception entry)
)

// raProbe is how one canonical event is captured on this kernel.
type raProbe struct {
	name     string // canonical
	byTask   bool   // filtered by the test's thread, not by the file
	tp       string // tracepoint "system/event", or "" for a kprobe
	tpFields []string
	symbol   string // kprobed function
	optional bool   // the validation can do without it
	args     func(o *kernelOffsets) string
	output   string // event name in the trace
}

var raProbes = []raProbe{
	{name: evDelete, tp: "filemap/mm_filemap_delete_from_page_cache", tpFields: []string{"i_ino", "s_dev"}},
	{name: evSync, tp: "readahead/page_cache_sync_ra", tpFields: []string{"i_ino", "index", "req_count", "ra_pages", "mmap_miss"},
		symbol: "page_cache_sync_ra", args: func(o *kernelOffsets) string { return o.ractlArgs("%si") }},
	{name: evAsync, tp: "readahead/page_cache_async_ra", tpFields: []string{"i_ino", "index", "req_count", "ra_pages", "mmap_miss"},
		symbol: "page_cache_async_ra", args: func(o *kernelOffsets) string { return o.ractlArgs("%dx") }},
	{name: evOrder, tp: "readahead/page_cache_ra_order", tpFields: []string{"i_ino", "index", "size", "async_size"},
		symbol: "page_cache_ra_order", args: func(o *kernelOffsets) string { return o.orderArgs() }},
	{name: evFault, tp: "filemap/mm_filemap_fault", tpFields: []string{"i_ino", "index"},
		symbol: "filemap_fault", args: func(o *kernelOffsets) string { return o.faultArgs() }},
	{name: evMap, tp: "filemap/mm_filemap_map_pages", tpFields: []string{"i_ino", "index", "last_index"},
		symbol: "filemap_map_pages", args: func(o *kernelOffsets) string { return o.mapArgs() }},
	// The recorder's read rows on kernels with this tracepoint; older
	// ones record whole read calls with kprobe:filemap_read (docs/record.md).
	{name: evLookup, tp: "filemap/mm_filemap_get_pages", tpFields: []string{"i_ino", "index", "last_index"}, optional: true},
	// The recorder's fault op: one per hardware fault, shared by the
	// attempts of the kernel's retry loop (FAULT_FLAG_TRIED).
	{name: evUFault, tp: "exceptions/page_fault_user", tpFields: []string{"address", "error_code"}, optional: true, byTask: true},
}

// traceEvent is one parsed line of a tracefs trace file.
type traceEvent struct {
	name   string // canonical
	comm   string // task (comm-pid) the event fired in
	pid    int
	fields map[string]string
}

func (e traceEvent) u64(t *testing.T, key string) uint64 {
	t.Helper()
	v, ok := e.fields[key]
	if !ok {
		t.Fatalf("trace event %s: no field %q in %v", e.name, key, e.fields)
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		t.Fatalf("trace event %s: field %s=%q: %v", e.name, key, v, err)
	}
	return n
}

// pages returns the page range [first, last] of a fault, map or lookup
// event: tracepoints report byte offsets ("ofs=A" or "ofs=A-B"), the
// kprobes page indexes ("index=A last=B").
func (e traceEvent) pages(t *testing.T) (first, last uint64) {
	t.Helper()
	if _, ok := e.fields["ofs"]; !ok {
		first = e.u64(t, "index")
		last = first
		if _, ok := e.fields["last"]; ok {
			last = e.u64(t, "last")
		}
		return first, last
	}
	v := e.fields["ofs"]
	a, b, ranged := strings.Cut(v, "-")
	x, err := strconv.ParseUint(a, 10, 64)
	if err != nil {
		t.Fatalf("trace event %s: ofs=%q: %v", e.name, v, err)
	}
	first, last = x/4096, x/4096
	if ranged {
		y, err := strconv.ParseUint(b, 10, 64)
		if err != nil {
			t.Fatalf("trace event %s: ofs=%q: %v", e.name, v, err)
		}
		last = y / 4096
	}
	return first, last
}

// raTracer is a tracefs instance with the probes of this kernel.
type raTracer struct {
	dir      string
	group    string // kprobe group, when any kprobe is used
	probes   []raProbe
	byOutput map[string]string
	// triedFlag is FAULT_FLAG_TRIED when the fault probe reports the
	// fault's flags (the kprobe does, the tracepoint does not), else 0.
	triedFlag uint64
	missing   []string // optional probes the kernel lacks
}

// newRATracer sets up the probes, skipping the test (naming what is
// missing) where the kernel has neither a tracepoint nor a kprobe for a
// needed event.
func newRATracer(t *testing.T) *raTracer {
	if os.Geteuid() != 0 {
		t.Skip("readahead validation needs root (CAP_SYS_ADMIN) for tracefs")
	}
	if _, err := os.Stat(filepath.Join(tracefsRoot, "instances")); err != nil {
		if err := unix.Mount("nodev", tracefsRoot, "tracefs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			t.Skipf("readahead validation needs tracefs at %s: mount: %v", tracefsRoot, err)
		}
	}
	tr := &raTracer{byOutput: map[string]string{}, group: fmt.Sprintf("predictio_ra_%d", os.Getpid())}
	var offsets *kernelOffsets
	var kprobes []string
	for _, p := range raProbes {
		format := filepath.Join(tracefsRoot, "events", p.tp, "format")
		if b, err := os.ReadFile(format); err == nil {
			for _, f := range p.tpFields {
				if !bytes.Contains(b, []byte(" "+f+";")) {
					t.Fatalf("tracepoint %s has no field %s; format:\n%s", p.tp, f, b)
				}
			}
			p.output = p.tp[strings.Index(p.tp, "/")+1:]
			tr.probes = append(tr.probes, p)
			tr.byOutput[p.output] = p.name
			continue
		}
		switch {
		case p.symbol == "" && p.optional:
			tr.missing = append(tr.missing, p.tp)
			continue
		case p.symbol == "":
			t.Skipf("kernel lacks tracepoint %s", p.tp)
		}
		if err := kprobeSupport(p.symbol); err != nil {
			t.Skipf("kernel lacks tracepoint %s and its kprobe fallback kprobe:%s: %v", p.tp, p.symbol, err)
		}
		if offsets == nil {
			o, err := loadKernelOffsets()
			if err != nil {
				t.Skipf("kernel lacks tracepoint %s, and the kprobe fallback needs struct offsets from BTF: %v", p.tp, err)
			}
			offsets = o
			tr.triedFlag = o.faultTried
		}
		p.tp = ""
		p.output = "ra_" + p.name
		kprobes = append(kprobes, fmt.Sprintf("p:%s/%s %s %s", tr.group, p.output, p.symbol, p.args(offsets)))
		tr.probes = append(tr.probes, p)
		tr.byOutput[p.output] = p.name
	}
	if !tr.has(evFault) || tr.probeOf(evFault).tp != "" {
		tr.triedFlag = 0
	}
	for _, def := range kprobes {
		if err := appendFile(filepath.Join(tracefsRoot, "kprobe_events"), def); err != nil {
			t.Fatalf("define kprobe %q: %v", def, err)
		}
		name := strings.Fields(def)[0][2:]
		t.Cleanup(func() { appendFile(filepath.Join(tracefsRoot, "kprobe_events"), "-:"+name) })
	}
	tr.dir = filepath.Join(tracefsRoot, "instances", fmt.Sprintf("predictio-ra-%d", os.Getpid()))
	if err := os.Mkdir(tr.dir, 0o700); err != nil && !os.IsExist(err) {
		t.Fatalf("create tracefs instance: %v", err)
	}
	// Registered after the kprobes, so it runs before their removal.
	t.Cleanup(func() {
		tr.enable(false)
		os.Remove(tr.dir)
	})
	tr.write(t, "buffer_size_kb", "16384")
	return tr
}

// describe says where each event comes from, for the log.
func (tr *raTracer) describe() string {
	var parts []string
	for _, p := range tr.probes {
		src := "tracepoint " + p.tp
		if p.tp == "" {
			src = "kprobe:" + p.symbol
		}
		parts = append(parts, p.name+"="+src)
	}
	return strings.Join(parts, ", ")
}

func (tr *raTracer) has(name string) bool { return tr.probeOf(name) != nil }

func (tr *raTracer) probeOf(name string) *raProbe {
	for i := range tr.probes {
		if tr.probes[i].name == name {
			return &tr.probes[i]
		}
	}
	return nil
}

func appendFile(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// kprobeSupport returns nil if symbol can be kprobed through tracefs.
func kprobeSupport(symbol string) error {
	if _, err := os.Stat(filepath.Join(tracefsRoot, "kprobe_events")); err != nil {
		return fmt.Errorf("no kprobe_events in tracefs (CONFIG_KPROBE_EVENTS): %w", err)
	}
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		return err
	}
	if !bytes.Contains(b, []byte(" "+symbol+"\n")) {
		return fmt.Errorf("%s is not a text symbol in /proc/kallsyms", symbol)
	}
	return nil
}

func (tr *raTracer) path(elem ...string) string {
	return filepath.Join(append([]string{tr.dir}, elem...)...)
}

func (tr *raTracer) write(t *testing.T, rel, v string) {
	if err := os.WriteFile(tr.path(rel), []byte(v), 0); err != nil {
		t.Fatalf("write %s: %v", rel, err)
	}
}

func (tr *raTracer) eventDir(p *raProbe) string {
	if p.tp != "" {
		return tr.path("events", p.tp)
	}
	return tr.path("events", tr.group, p.output)
}

func (tr *raTracer) enable(on bool) {
	v := "0"
	if on {
		v = "1"
	}
	for i := range tr.probes {
		os.WriteFile(filepath.Join(tr.eventDir(&tr.probes[i]), "enable"), []byte(v), 0)
	}
}

// capture runs fn with the events enabled for inode ino of device dev
// (stat's st_dev), and the per-task ones for thread tid, and returns what
// they logged.
func (tr *raTracer) capture(t *testing.T, dev, ino uint64, tid int, fn func()) []traceEvent {
	tr.write(t, "trace", "")
	kdev := uint64(unix.Major(dev))<<20 | uint64(unix.Minor(dev)) // the kernel's s_dev encoding
	for i := range tr.probes {
		p := &tr.probes[i]
		filter := fmt.Sprintf("i_ino == %d && s_dev == %d", ino, kdev)
		switch {
		case p.byTask:
			filter = fmt.Sprintf("common_pid == %d", tid)
		case p.tp == "":
			filter = fmt.Sprintf("ino == %d && dev == %d", ino, kdev)
		}
		if err := os.WriteFile(filepath.Join(tr.eventDir(p), "filter"), []byte(filter), 0); err != nil {
			t.Fatalf("filter %s: %v", p.name, err)
		}
	}
	tr.enable(true)
	fn()
	tr.enable(false)
	b, err := os.ReadFile(tr.path("trace"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("LOST")) {
		t.Fatalf("trace buffer lost events")
	}
	return tr.parse(b)
}

func (tr *raTracer) parse(data []byte) []traceEvent {
	var evs []traceEvent
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		// "  comm-PID  [CPU] flags  TS: NAME: fields"
		br := strings.Index(line, " [")
		if br < 0 {
			continue
		}
		rest := line[br:]
		c := strings.Index(rest, ": ")
		if c < 0 {
			continue
		}
		rest = rest[c+2:]
		name, fields, ok := strings.Cut(rest, ": ")
		if !ok {
			continue
		}
		canon, ok := tr.byOutput[name]
		if !ok {
			continue
		}
		ev := traceEvent{name: canon, fields: map[string]string{}}
		head := strings.TrimSpace(line[:br])
		ev.comm = head
		if i := strings.LastIndexByte(head, '-'); i >= 0 {
			ev.pid, _ = strconv.Atoi(head[i+1:])
		}
		for _, tok := range strings.Fields(fields) {
			if k, v, ok := strings.Cut(tok, "="); ok {
				ev.fields[k] = v
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// kernelOffsets are the byte offsets, from the kernel's BTF, of the fields
// the kprobes read.
type kernelOffsets struct {
	ractlMapping, ractlRA, ractlIndex uint32
	mappingHost                       uint32
	inodeIno, inodeSB, sbDev          uint32
	raStart, raSize, raAsync          field
	raPages, raMmapMiss, raPrevPos    field
	vmfVMA, vmfPgoff, vmfFlags        uint32
	vmaFile, fileMapping              uint32
	faultTried                        uint64
}

type field struct {
	off  uint32
	size int
}

func (f field) fetch(base string, signed bool) string {
	t := "u"
	if signed {
		t = "s"
	}
	return fmt.Sprintf("+%d(%s):%s%d", f.off, base, t, f.size*8)
}

func loadKernelOffsets() (*kernelOffsets, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, err
	}
	var o kernelOffsets
	var errs []error
	off := func(s, m string) uint32 {
		f, err := btfField(spec, s, m)
		if err != nil {
			errs = append(errs, err)
		}
		return f.off
	}
	fld := func(s, m string) field {
		f, err := btfField(spec, s, m)
		if err != nil {
			errs = append(errs, err)
		}
		return f
	}
	o.ractlMapping, o.ractlRA, o.ractlIndex = off("readahead_control", "mapping"), off("readahead_control", "ra"), off("readahead_control", "_index")
	o.mappingHost = off("address_space", "host")
	o.inodeIno, o.inodeSB, o.sbDev = off("inode", "i_ino"), off("inode", "i_sb"), off("super_block", "s_dev")
	o.raStart, o.raSize, o.raAsync = fld("file_ra_state", "start"), fld("file_ra_state", "size"), fld("file_ra_state", "async_size")
	o.raPages, o.raMmapMiss, o.raPrevPos = fld("file_ra_state", "ra_pages"), fld("file_ra_state", "mmap_miss"), fld("file_ra_state", "prev_pos")
	o.vmfVMA, o.vmfPgoff, o.vmfFlags = off("vm_fault", "vma"), off("vm_fault", "pgoff"), off("vm_fault", "flags")
	o.vmaFile, o.fileMapping = off("vm_area_struct", "vm_file"), off("file", "f_mapping")
	var e *btf.Enum
	if err := spec.TypeByName("fault_flag", &e); err != nil {
		errs = append(errs, fmt.Errorf("enum fault_flag: %w", err))
	} else {
		for _, v := range e.Values {
			if v.Name == "FAULT_FLAG_TRIED" {
				o.faultTried = v.Value
			}
		}
		if o.faultTried == 0 {
			errs = append(errs, errors.New("enum fault_flag has no FAULT_FLAG_TRIED"))
		}
	}
	return &o, errors.Join(errs...)
}

// btfField finds member m of struct s, also inside anonymous structs and
// unions, and returns its byte offset and size.
func btfField(spec *btf.Spec, s, m string) (field, error) {
	var st *btf.Struct
	if err := spec.TypeByName(s, &st); err != nil {
		return field{}, fmt.Errorf("struct %s: %w", s, err)
	}
	if f, ok := findMember(st.Members, m, 0); ok {
		return f, nil
	}
	return field{}, fmt.Errorf("struct %s has no member %s", s, m)
}

func findMember(ms []btf.Member, name string, base uint32) (field, bool) {
	for _, mb := range ms {
		off := base + uint32(mb.Offset)/8
		if mb.Name == name {
			n, err := btf.Sizeof(mb.Type)
			if err != nil {
				return field{}, false
			}
			return field{off, n}, true
		}
		if mb.Name != "" {
			continue
		}
		switch t := btf.UnderlyingType(mb.Type).(type) {
		case *btf.Struct:
			if f, ok := findMember(t.Members, name, off); ok {
				return f, true
			}
		case *btf.Union:
			if f, ok := findMember(t.Members, name, off); ok {
				return f, true
			}
		}
	}
	return field{}, false
}

// host returns the fetch args for ino and dev of the inode at pointer p.
func (o *kernelOffsets) host(p string) string {
	return fmt.Sprintf("ino=+%d(%s):u64 dev=+%d(+%d(%s)):u32", o.inodeIno, p, o.sbDev, o.inodeSB, p)
}

// ractlArgs reads a readahead_control (%di) and its file_ra_state; req is
// the register holding req_count.
func (o *kernelOffsets) ractlArgs(req string) string {
	host := fmt.Sprintf("+%d(+%d(%%di))", o.mappingHost, o.ractlMapping)
	ra := fmt.Sprintf("+%d(%%di)", o.ractlRA)
	return fmt.Sprintf("%s index=+%d(%%di):u64 req_count=%s:u64 size=%s async_size=%s ra_pages=%s mmap_miss=%s prev_pos=%s",
		o.host(host), o.ractlIndex, req, o.raSize.fetch(ra, false), o.raAsync.fetch(ra, false),
		o.raPages.fetch(ra, false), o.raMmapMiss.fetch(ra, false), o.raPrevPos.fetch(ra, true))
}

// orderArgs reads page_cache_ra_order(ractl, ra, ...): the window it is
// asked to allocate.
func (o *kernelOffsets) orderArgs() string {
	host := fmt.Sprintf("+%d(+%d(%%di))", o.mappingHost, o.ractlMapping)
	return fmt.Sprintf("%s index=+%d(%%di):u64 size=%s async_size=%s",
		o.host(host), o.ractlIndex, o.raSize.fetch("%si", false), o.raAsync.fetch("%si", false))
}

func (o *kernelOffsets) vmfHost() string {
	return fmt.Sprintf("+%d(+%d(+%d(+%d(%%di))))", o.mappingHost, o.fileMapping, o.vmaFile, o.vmfVMA)
}

// faultArgs reads filemap_fault(vmf): the faulting page and the flags.
func (o *kernelOffsets) faultArgs() string {
	return fmt.Sprintf("%s index=+%d(%%di):u64 flags=+%d(%%di):u32", o.host(o.vmfHost()), o.vmfPgoff, o.vmfFlags)
}

// mapArgs reads filemap_map_pages(vmf, start_pgoff, end_pgoff).
func (o *kernelOffsets) mapArgs() string {
	return fmt.Sprintf("%s index=%%si:u64 last=%%dx:u64", o.host(o.vmfHost()))
}
