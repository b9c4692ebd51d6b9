package source

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/blockdev"
)

// Capability numbers (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// ErrPermission is wrapped by the error Open returns when capabilities are
// missing.
var ErrPermission = errors.New("missing capabilities")

// ErrNotSupported is wrapped when the kernel lacks every access tracepoint.
var ErrNotSupported = errors.New("not supported by this kernel")

// effectiveCaps returns the calling thread's effective capability set.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// missingCaps names the capabilities absent from eff. CAP_BPF and
// CAP_PERFMON (Linux 5.8) may each be replaced by CAP_SYS_ADMIN, as on older
// kernels; CAP_SYS_ADMIN itself is needed when needAdmin is set (mounting
// tracefs, creating the command's cgroup).
func missingCaps(eff uint64, needAdmin bool) []string {
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	var miss []string
	admin := has(capSysAdmin)
	if !has(capBPF) && !admin {
		miss = append(miss, "CAP_BPF")
	}
	if !has(capPerfmon) && !admin {
		miss = append(miss, "CAP_PERFMON")
	}
	if needAdmin && !admin {
		miss = append(miss, "CAP_SYS_ADMIN")
	}
	return miss
}

func checkPrivileges(needAdmin bool) error {
	eff, err := effectiveCaps()
	if err != nil {
		return err
	}
	if miss := missingCaps(eff, needAdmin); len(miss) > 0 {
		return fmt.Errorf("check privileges: %s: %w; run predictio as root (sudo) or grant them with setcap",
			strings.Join(miss, ", "), ErrPermission)
	}
	return nil
}

// tracefsEvents returns the tracefs events directory, or "" when tracefs is
// not mounted.
func tracefsEvents() string {
	for _, d := range []string{"/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// mountTracefs mounts tracefs at /sys/kernel/tracing when no tracefs is
// mounted (needs CAP_SYS_ADMIN).
func mountTracefs() error {
	if tracefsEvents() != "" {
		return nil
	}
	if err := unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
		return fmt.Errorf("mount tracefs at /sys/kernel/tracing: %w (mount it yourself: mount -t tracefs tracefs /sys/kernel/tracing)", err)
	}
	return nil
}

// tracepointExists reports whether group:name is in tracefs.
func tracepointExists(events, group, name string) bool {
	_, err := os.Stat(events + "/" + group + "/" + name + "/id")
	return err == nil
}

// probe is one tracepoint the source can attach (as a raw tracepoint), or,
// for access kinds, the kprobe used in its place where the tracepoint is
// missing.
type probe struct {
	group, name string             // tracepoint; raw tracepoints are named by name alone
	prog        string             // program name in record.bpf.c
	kind        formats.AccessKind // 0 for non-access sources
	minKernel   string
	// kprobe is the kernel function probed when the tracepoint is missing
	// (and the kernel has kprobes), with its program kprobeProg.
	kprobe, kprobeProg string
	viaKprobe          bool // probe says: attach the kprobe, not the tracepoint
}

// String names the source as the manifest lists it: "group:name" for a
// tracepoint, "kprobe:function" for a kprobe fallback.
func (s probe) String() string {
	if s.viaKprobe {
		return "kprobe:" + s.kprobe
	}
	return s.group + ":" + s.name
}

// accessSources are the page-access tracepoints, in docs/record.md order.
var accessSources = []probe{
	{"filemap", "mm_filemap_get_pages", "handle_get_pages", formats.KindRead, "6.11", "filemap_read", "kprobe_read", false},
	{"filemap", "mm_filemap_fault", "handle_fault", formats.KindFault, "6.11", "filemap_fault", "kprobe_fault", false},
	{"filemap", "mm_filemap_map_pages", "handle_map_pages", formats.KindMap, "6.11", "filemap_map_pages", "kprobe_map_pages", false},
	{"filemap", "mm_filemap_add_to_page_cache", "handle_cache_add", formats.KindCacheAdd, "3.15", "", "", false},
	{"readahead", "page_cache_sync_ra", "handle_sync_ra", formats.KindReadaheadSync, "6.14", "page_cache_sync_ra", "kprobe_sync_ra", false},
	{"readahead", "page_cache_async_ra", "handle_async_ra", formats.KindReadaheadAsync, "6.14", "page_cache_async_ra", "kprobe_async_ra", false},
}

// probeAccessSources returns the access sources to attach: each tracepoint
// present in the tracefs events directory, else its kprobe fallback when
// hasKprobe (nil: no kprobes) says the function can be probed. It names
// the kinds that have neither, with their kernel minimum, and fails,
// wrapping ErrNotSupported, when no kind has a source.
func probeAccessSources(events string, hasKprobe func(fn string) bool) (present []probe, missing []string, err error) {
	for _, s := range accessSources {
		switch {
		case tracepointExists(events, s.group, s.name):
			present = append(present, s)
		case s.kprobe != "" && hasKprobe != nil && hasKprobe(s.kprobe):
			s.viaKprobe = true
			present = append(present, s)
		default:
			m := s.group + ":" + s.name + " (Linux " + s.minKernel + ")"
			if s.kprobe != "" {
				m += " and kprobe " + s.kprobe
			}
			missing = append(missing, m)
		}
	}
	if len(present) == 0 {
		return nil, missing, fmt.Errorf("probe tracepoints: none of the access tracepoints (or their kprobe fallbacks) exist: %s: %w; see docs/record.md for the kernel each needs",
			strings.Join(missing, ", "), ErrNotSupported)
	}
	return present, missing, nil
}

// kprobeFuncs returns a function telling whether a kernel function can be
// kprobed: the kernel has kprobes (the kprobe PMU or tracefs kprobe_events,
// CONFIG_KPROBE_EVENTS) and the function is a text symbol in
// /proc/kallsyms. It returns nil when the kernel has no kprobes (as on
// kernels built without CONFIG_KPROBES).
func kprobeFuncs(events string) func(string) bool {
	_, err1 := os.Stat("/sys/bus/event_source/devices/kprobe/type")
	_, err2 := os.Stat(filepath.Join(filepath.Dir(events), "kprobe_events"))
	if err1 != nil && err2 != nil {
		return nil
	}
	want := make(map[string]bool)
	for _, s := range accessSources {
		if s.kprobe != "" {
			want[s.kprobe] = false
		}
	}
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address type name [module]
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || (fields[1] != "T" && fields[1] != "t") {
			continue
		}
		if _, ok := want[fields[2]]; ok {
			want[fields[2]] = true
		}
	}
	return func(fn string) bool { return want[fn] }
}

// helperSources follow processes and opens; they are optional.
var helperSources = []probe{
	{"sched", "sched_process_fork", "handle_fork", 0, "4.14", "", "", false},
	{"sched", "sched_process_exit", "handle_exit", 0, "4.14", "", "", false},
	{"raw_syscalls", "sys_enter", "handle_sys_enter", 0, "4.17", "", "", false},
	{"raw_syscalls", "sys_exit", "handle_sys_exit", 0, "4.17", "", "", false},
	{"exceptions", "page_fault_user", "handle_page_fault", 0, "4.17", "", "", false},
	{"exceptions", "page_fault_kernel", "handle_page_fault", 0, "4.17", "", "", false},
}

// execSource reports execs (Config.Exec, ExecTargets).
var execSource = probe{"sched", "sched_process_exec", "handle_exec", 0, "4.17", "", "", false}

// cgroup2Mount returns the mount point of the cgroup v2 hierarchy, or "".
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount_point ... - fstype source opts
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return unescapeMount(fields[4])
			}
		}
	}
	return ""
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// Filesystems describes the block devices of files, from
// /proc/self/mountinfo and /sys/dev/block.
func Filesystems(files []formats.File) []formats.Filesystem {
	devs := make(map[uint64]bool)
	for _, f := range files {
		if f.Path != "" {
			devs[f.Dev] = true
		}
	}
	if len(devs) == 0 {
		return nil
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []formats.Filesystem
	for _, line := range strings.Split(string(b), "\n") {
		// id parent MAJ:MIN root mount_point opts ... - fstype source superopts
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		var maj, min uint64
		if _, err := fmt.Sscanf(f[2], "%d:%d", &maj, &min); err != nil {
			continue
		}
		dev := maj<<20 | min
		if !devs[dev] {
			continue
		}
		delete(devs, dev)
		fs := formats.Filesystem{Dev: dev, MountPoint: unescapeMount(f[4])}
		for i := 5; i+2 < len(f); i++ {
			if f[i] == "-" {
				fs.FSType, fs.Device = f[i+1], f[i+2]
				break
			}
		}
		if v, err := blockdev.Attr("/sys", uint32(maj), uint32(min), "queue/rotational"); err == nil {
			fs.Rotational = v == "1"
		}
		if v, err := blockdev.Uint("/sys", uint32(maj), uint32(min), "queue/logical_block_size"); err == nil {
			fs.LogicalBlockSize = int(v)
		}
		out = append(out, fs)
	}
	return out
}

// Check reports whether a Source can run here and attach the named
// tracepoints ("group:name", e.g. "filemap:mm_filemap_get_pages"): nil, an
// error wrapping ErrPermission that names every missing capability, or
// one wrapping ErrNotSupported that names a tracepoint the kernel lacks
// (with its kprobe fallback, for access kinds). Tests skip with its text.
// It mounts tracefs when it is not mounted.
func Check(tracepoints ...string) error {
	eff, err := effectiveCaps()
	if err != nil {
		return err
	}
	if miss := missingCaps(eff, true); len(miss) > 0 {
		return fmt.Errorf("tracing needs %s (run as root): %w", strings.Join(miss, ", "), ErrPermission)
	}
	if err := mountTracefs(); err != nil {
		return err
	}
	ev := tracefsEvents()
	var kp func(string) bool
	for _, s := range tracepoints {
		g, n, _ := strings.Cut(s, ":")
		if tracepointExists(ev, g, n) {
			continue
		}
		fallback := ""
		for _, a := range accessSources {
			if a.group == g && a.name == n {
				fallback = a.kprobe
			}
		}
		if fallback == "" {
			return fmt.Errorf("kernel lacks tracepoint %s: %w", s, ErrNotSupported)
		}
		if kp == nil {
			if kp = kprobeFuncs(ev); kp == nil {
				kp = func(string) bool { return false }
			}
		}
		if !kp(fallback) {
			return fmt.Errorf("kernel lacks tracepoint %s and its kprobe fallback kprobe:%s: %w", s, fallback, ErrNotSupported)
		}
	}
	return nil
}

// CgroupV2Mount returns the mount point of the cgroup v2 hierarchy, or "".
func CgroupV2Mount() string { return cgroup2Mount() }
