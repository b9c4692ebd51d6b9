//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
// record.bpf.c: page-cache access tracing for predictio's event source.
//
// The programs attach to raw tracepoints (BPF_RAW_TRACEPOINT_OPEN): unlike
// perf-event tracepoint links, whose release waits for RCU grace periods
// under a global mutex (~35 ms each here), a raw tracepoint link detaches
// in microseconds, and the program gets the tracepoint's arguments without
// the trace event record being built first.
//
// Every filemap/readahead handler checks that the current task is a target
// (every task, a pid set maintained across fork/exit, or up to four cgroup
// v2 subtrees; user space may change them while tracing), applies the comm
// filter and the per-file deny set that user space fills as it resolves
// files, and emits one fixed-size struct event into the events ring
// buffer. open/openat/openat2/execve/execveat of targets go to the opens
// ring buffer so user space can resolve (dev, ino) to paths.
#include "record.h"
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// target_flags bits: which targets is_target accepts.
#define TARGET_ALL 1
#define TARGET_PIDS 2
#define TARGET_CGROUPS 4

#define MAX_CGROUPS 4

#define FILE_ALLOW 1
#define FILE_DENY 2

const volatile __u8 comm_filter = 0;
const volatile __u32 self_tgid = 0;
// target_flags and cgroup_mask (the cgroups slots in use) are set by user
// space, also while tracing.
volatile __u32 target_flags = 0;
volatile __u32 cgroup_mask = 0;
// stopped is set by user space to end tracing before the links are closed.
volatile __u32 stopped = 0;
// deny_active is set by user space once the files map holds a denied file,
// so the lookup is skipped while there is nothing to deny.
volatile __u32 deny_active = 0;
// exec_all reports the exec of every task, not only of targets.
volatile __u32 exec_all = 0;
// exec_targets_active is set once exec_targets holds a file.
volatile __u32 exec_targets_active = 0;
// target_gen changes with every change of the targets, so a thread's
// cached "is a target" (tstate.gen) expires.
volatile __u32 target_gen = 1;

struct filekey {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

#define OPEN_EXEC 1 // flags: the path was given to execve/execveat
#define OPEN_ROW 2  // flags: the path of the row with this op (EV_PATH)

// open_event is a path a target looked up (an open, stat or exec), 304
// bytes, in the opens ring. dir_dev and dir_ino name the directory dfd
// was open on when the call returned (0 for AT_FDCWD, or no such file):
// by the time user space reads the event the program may have closed dfd
// and opened another directory under its number (grep -r does), so
// /proc/PID/fd/DFD names the wrong one.
struct open_event {
	__u64 ts;
	__u64 op; // OPEN_ROW: the row's op
	__u32 pid;
	__u32 tid;
	__s32 dfd;
	__u32 flags;
	__u32 dir_dev;
	__u32 pad;
	__u64 dir_ino;
	char path[256];
};

// Reference the record types once so clang emits their BTF for bpf2go -type.
const struct event *unused_event __attribute__((unused));
const struct open_event *unused_open_event __attribute__((unused));

#define OPENS_BYTES (1 << 20)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, OPENS_BYTES);
} opens SEC(".maps");

// pids: the followed processes and threads. Not preallocated (elements
// come from the BPF memory allocator, Linux 6.1), so creating it costs
// little however large the cap.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, MAX_CGROUPS);
	__type(key, __u32);
	__type(value, __u32);
} cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, char[16]);
	__type(value, __u8);
} comms SEC(".maps");

// files is the deny set. Only user space inserts, so it is not
// preallocated (a preallocated 256 K-entry hash costs ~8 ms to create);
// user space sizes it by the target (its bucket array still costs ~3 ms
// at 256 K entries).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct filekey);
	__type(value, __u8);
} files SEC(".maps");

// exec_targets: an exec of one of these files adds the task to pids.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct filekey);
	__type(value, __u8);
} exec_targets SEC(".maps");

static __always_inline bool under_cgroups(void)
{
	__u32 mask = cgroup_mask;

	// Unrolled: the verifier of Linux 6.1 still walks bounded loops
	// iteration by iteration anyway.
#pragma unroll
	for (__u32 i = 0; i < MAX_CGROUPS; i++) {
		if ((mask & (1u << i)) && bpf_current_task_under_cgroup(&cgroups, i) == 1)
			return true;
	}
	return false;
}

// target_slow reports whether the current task is a target by the
// targets themselves; is_target asks it only when the thread has no
// answer cached for the current targets.
static __always_inline bool target_slow(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;

	if (stopped)
		return false;
	if (tgid == self_tgid)
		return false;
	__u32 flags = target_flags;
	if (flags & TARGET_ALL)
		return true;
	if ((flags & TARGET_PIDS) && bpf_map_lookup_elem(&pids, &tgid))
		return true;
	if ((flags & TARGET_CGROUPS) && under_cgroups())
		return true;
	return false;
}

// row is one event before it goes into the ring.
struct row {
	__u64 ts, end, op;
	__s64 ret;
	__u64 ino, index, map_pgoff, map_pages;
	__u32 dev, npages;
	__u8 kind, prot, flags;
	__u32 tracer_ns, tracer_calls;
};

// record_row applies the deny set and the comm filter and writes one
// event; the caller has checked the target. It returns 1 when the event
// went into the ring.
static __always_inline int record_row(__u64 pid_tgid, const struct row *r)
{
	if (deny_active && r->ino) {
		struct filekey k = {.ino = r->ino, .dev = r->dev};
		__u8 *v = bpf_map_lookup_elem(&files, &k);
		if (v && *v == FILE_DENY) {
			count(CNT_FILTERED);
			return 0;
		}
	}

	// Two 8-byte loads from the current task's comm: much cheaper than
	// bpf_get_current_comm's byte-wise copy. The comm filter looks it up
	// from the stack (before Linux 6.2 or so the verifier refuses a map
	// key in ring buffer memory).
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 comm[2];
	comm[0] = *(__u64 *)&task->comm[0];
	comm[1] = *(__u64 *)&task->comm[8];
	if (comm_filter && !bpf_map_lookup_elem(&comms, comm)) {
		count(CNT_FILTERED);
		return 0;
	}

	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(CNT_DROPS);
		return 0;
	}
	__u64 *dst = (__u64 *)e->comm;
	dst[0] = comm[0];
	dst[1] = comm[1];
	e->ts = r->ts;
	e->end = r->end;
	e->op = r->op;
	e->ret = r->ret;
	e->ino = r->ino;
	e->index = r->index;
	e->map_pgoff = r->map_pgoff;
	e->map_pages = r->map_pages;
	e->dev = r->dev;
	e->npages = r->npages;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->kind = r->kind;
	e->prot = r->prot;
	e->flags = r->flags;
	e->tracer_ns = r->tracer_ns;
	e->tracer_calls = r->tracer_calls;
	submit(e);
	return 1;
}

// record_event writes a plain event: kind, file, pages, at this moment.
static __always_inline int record_event(__u64 pid_tgid, __u8 kind, __u64 dev, __u64 ino, __u64 index, __u64 npages)
{
	struct row r = {.ts = bpf_ktime_get_ns(), .kind = kind, .dev = dev, .ino = ino, .index = index, .npages = npages};
	return record_row(pid_tgid, &r);
}

// Operation ids: per CPU, (cpu + 1) << 48 | a counter, so never 0 and
// unique without atomics (a program runs to its end on one CPU).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} opseq SEC(".maps");

static __always_inline __u64 new_op(void)
{
	__u32 k = 0;
	__u64 *s = bpf_map_lookup_elem(&opseq, &k);
	if (!s)
		return 0;
	*s += 1;
	return ((__u64)(bpf_get_smp_processor_id() + 1) << 48) | (*s & 0xffffffffffffULL);
}

// tstate is what a traced thread is doing: the system call in flight (its
// exit completes the row) and the user page fault it is in.
struct tstate {
	__u64 sys_ts; // entry of the traced system call in flight; 0: none
	__u64 sys_op;
	__u64 a0, a1, a2, a3, a4, a5; // its arguments, for the exit
	__u64 pos;                    // read family: the file position read from
	__u64 ino;                    // read family, getdents64, mmap: the file
	__u32 dev;
	__u32 nr; // its number
	__u64 fault_ts; // entry of the user page fault in progress; 0: none
	__u64 fault_op;
	__u64 fault_addr;
	__u64 vm_ino; // the faulting address's mapping, looked up once per fault
	__u64 vm_pgoff, vm_pages;
	__u32 vm_dev;
	__u8 vm_prot;
	__u8 vm_state; // 0: not looked up, 1: a file mapping, 2: none
	__u8 cf_mode;  // cf_*: the file of the last read, so the next read of it skips the inode walk
	__u8 pad;
	__u64 cf_file, cf_inode, cf_mnt, cf_dentry, cf_ino;
	__u32 cf_dev;
	__u32 gen;      // target_gen when this thread was last found a target
	__u32 read_cpu; // the inread slot set for its read in flight
	__u32 tracer_row;   // the call in flight's tracer_ns (tracer_gap when it entered, and its entry's head)
	__u32 calls_row;    // the call in flight's tracer_calls
	__u32 calls_gap;    // system calls the thread made since the last noted call entered, not counting it
	__u64 tracer_gap;   // this program's time in the thread since the last noted call entered: that call's exit tail, heads of calls not noted
};

// threads: per traced thread, in the task's own local storage (Linux
// 5.11 for tracing programs): made at the thread's first traced system
// call or fault, freed with the task, with no cap on the threads (the
// hash it replaces held 64 K). A lookup follows the task's storage
// pointer instead of hashing the tid into a bucket, and a task with no
// storage (every other task, at each of its system call exits) costs a
// pointer test.
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tstate);
} threads SEC(".maps");

// inread[cpu] is the thread that entered a traced read system call on that
// CPU and has not left it (0: none): a page-cache lookup inside the call
// (one per read: the common case) is told apart with this array lookup,
// which the verifier inlines, instead of a threads lookup (a helper
// call). A thread that migrates during its read, or whose slot another
// thread took, falls back to threads. User space sizes it to the
// possible CPUs.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} inread SEC(".maps");

// set_inread makes the inread slot say whether thread tid (with state t)
// is in a traced read: taken on this CPU, or released where it was taken
// if it still holds tid.
static __always_inline void set_inread(struct tstate *t, __u32 tid, bool in)
{
	__u32 cpu = in ? bpf_get_smp_processor_id() : t->read_cpu;
	__u32 *slot = bpf_map_lookup_elem(&inread, &cpu);
	if (!slot)
		return;
	if (in) {
		*slot = tid;
		t->read_cpu = cpu;
	} else if (*slot == tid) {
		*slot = 0;
	}
}

// thread_state returns the current thread's state, made (zeroed) if
// create and it has none.
static __always_inline struct tstate *thread_state(bool create)
{
	return bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

// is_target reports whether the current task is traced. A thread that
// sys_enter found a target, with the targets unchanged since (tstate.gen),
// skips the pid lookup or cgroup walk.
static __always_inline bool is_target(__u64 pid_tgid)
{
	if (stopped)
		return false;
	struct tstate *t = thread_state(false);
	if (t && t->gen == target_gen)
		return true;
	return target_slow(pid_tgid);
}

// x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
#define NR_read 0
#define NR_open 2
#define NR_newstat 4
#define NR_newlstat 6
#define NR_mmap 9
#define NR_pread64 17
#define NR_readv 19
#define NR_access 21
#define NR_sendfile64 40
#define NR_execve 59
#define NR_getdents64 217
#define NR_openat 257
#define NR_newfstatat 262
#define NR_faccessat 269
#define NR_splice 275
#define NR_preadv 295
#define NR_execveat 322
#define NR_copy_file_range 326
#define NR_preadv2 327
#define NR_statx 332
#define NR_openat2 437
#define NR_faccessat2 439

static __always_inline bool is_read_nr(__u32 nr)
{
	return nr == NR_read || nr == NR_pread64 || nr == NR_readv || nr == NR_preadv || nr == NR_preadv2 ||
	       nr == NR_sendfile64 || nr == NR_splice || nr == NR_copy_file_range;
}

// in_read reports whether the current thread is inside a traced
// read-family system call: its page-cache lookups are folded into the
// call's row (only targets' calls are traced, so this needs no target
// check). A lookup of another file inside the call (a stacked filesystem
// reading its lower file) folds in too.
static __always_inline bool in_read(__u64 pid_tgid)
{
	__u32 tid = (__u32)pid_tgid, cpu = bpf_get_smp_processor_id();
	__u32 *slot = bpf_map_lookup_elem(&inread, &cpu);
	if (slot && tid && *slot == tid)
		return true;
	struct tstate *t = thread_state(false);
	return t && t->sys_ts && is_read_nr(t->nr);
}

static __always_inline int emit(__u8 kind, __u64 dev, __u64 ino, __u64 index, __u64 npages)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (!is_target(pid_tgid))
		return 0;
	return record_event(pid_tgid, kind, dev, ino, index, npages);
}

static __always_inline int emit_host(__u8 kind, struct inode *host, __u64 index, __u64 npages)
{
	if (!host)
		return 0;
	__u64 dev = BPF_CORE_READ(host, i_sb, s_dev);
	__u64 ino = BPF_CORE_READ(host, i_ino);
	return emit(kind, dev, ino, index, npages);
}

// emit_read is a read-path page-cache lookup, unless it happens inside a
// traced read system call, whose row covers it (checked first: it is the
// common case, and costs one lookup).
static __always_inline int emit_read(__u64 pid_tgid, struct inode *host, __u64 index, __u64 npages)
{
	if (!host || !is_target(pid_tgid))
		return 0;
	__u64 dev = BPF_CORE_READ(host, i_sb, s_dev);
	__u64 ino = BPF_CORE_READ(host, i_ino);
	return record_event(pid_tgid, KIND_READ, dev, ino, index, npages);
}

static __always_inline __u64 range_pages(__u64 first, __u64 last)
{
	return last >= first ? last - first + 1 : 1;
}

// Mapping protection: VM_READ, VM_WRITE and VM_EXEC are bits 0-2 of
// vm_flags, the same as formats.Prot*; formats.ProtShared (bit 3) is
// VM_MAYSHARE, set for every MAP_SHARED mapping (VM_SHARED, bit 3, is
// cleared when the file is not open for writing).
#define VM_MAYSHARE 0x80

// vma_file is what a fault needs of its mapping.
struct vma_file {
	__u64 ino, pgoff, pages;
	__u32 dev;
	__u8 prot;
	__u8 state; // 1: a file mapping, 2: none
};

static __always_inline void vma_info(struct vma_file *v, struct vm_area_struct *vma)
{
	struct file *f = vma ? BPF_CORE_READ(vma, vm_file) : NULL;
	struct inode *inode = f ? BPF_CORE_READ(f, f_inode) : NULL;
	if (!inode) {
		v->state = 2;
		return;
	}
	v->ino = BPF_CORE_READ(inode, i_ino);
	v->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	v->pgoff = BPF_CORE_READ(vma, vm_pgoff);
	v->pages = (BPF_CORE_READ(vma, vm_end) - BPF_CORE_READ(vma, vm_start)) >> 12;
	__u64 vmf = BPF_CORE_READ(vma, vm_flags);
	v->prot = (vmf & 7) | (vmf & VM_MAYSHARE ? 8 : 0);
	v->state = 1;
}

static long find_vma_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	vma_info((struct vma_file *)data, vma);
	return 0;
}

// fault_row fills r as a row of the page fault the thread is in, when it
// is in one (entered at page_fault_user or page_fault_kernel, no system
// call since) and the faulting address's mapping is of this file: ts the fault's
// entry, end now, its op, the mapping's protection and file range. vma
// is the fault's mapping when the caller has it (kprobes), else it is
// looked up by address (bpf_find_vma, Linux 5.17), once per fault.
static __always_inline void fault_row(__u64 pid_tgid, struct row *r, struct vm_area_struct *vma)
{
	struct tstate *t = thread_state(false);
	// Inside a traced system call only a fault that began in it counts
	// (not a get_user_pages fault, which has no exception).
	if (!t || !t->fault_ts || (t->sys_ts && t->fault_ts < t->sys_ts))
		return;
	if (t->vm_state == 0) {
		struct vma_file v = {.state = 2};
		if (vma)
			vma_info(&v, vma);
		else
			bpf_find_vma(bpf_get_current_task_btf(), t->fault_addr, find_vma_cb, &v, 0);
		t->vm_ino = v.ino;
		t->vm_dev = v.dev;
		t->vm_pgoff = v.pgoff;
		t->vm_pages = v.pages;
		t->vm_prot = v.prot;
		t->vm_state = v.state;
	}
	if (t->vm_state != 1 || t->vm_ino != r->ino || t->vm_dev != r->dev)
		return;
	r->end = r->ts;
	r->ts = t->fault_ts;
	r->op = t->fault_op;
	r->flags |= EV_FAULT;
	r->prot = t->vm_prot;
	r->map_pgoff = t->vm_pgoff;
	r->map_pages = t->vm_pages;
}

// emit_fault writes a fault or fault-around (map) row.
static __always_inline int emit_fault(__u8 kind, struct inode *host, __u64 index, __u64 npages, struct vm_area_struct *vma)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (!host || !is_target(pid_tgid))
		return 0;
	struct row r = {.ts = bpf_ktime_get_ns(), .kind = kind, .index = index, .npages = npages};
	r.dev = BPF_CORE_READ(host, i_sb, s_dev);
	r.ino = BPF_CORE_READ(host, i_ino);
	fault_row(pid_tgid, &r, vma);
	return record_row(pid_tgid, &r);
}

// mm_filemap_get_pages(struct address_space *mapping, pgoff_t index,
// pgoff_t last_index) (Linux 6.11).
SEC("raw_tp/mm_filemap_get_pages")
int BPF_PROG(handle_get_pages, struct address_space *mapping, unsigned long first, unsigned long last)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (in_read(pid_tgid))
		return 0;
	return emit_read(pid_tgid, BPF_CORE_READ(mapping, host), first, range_pages(first, last));
}

// mm_filemap_map_pages(struct address_space *mapping, pgoff_t index,
// pgoff_t last_index) (Linux 6.11).
SEC("raw_tp/mm_filemap_map_pages")
int BPF_PROG(handle_map_pages, struct address_space *mapping, unsigned long first, unsigned long last)
{
	return emit_fault(KIND_MAP, BPF_CORE_READ(mapping, host), first, range_pages(first, last), NULL);
}

// mm_filemap_fault(struct address_space *mapping, pgoff_t index) (Linux
// 6.11). It fires as filemap_fault starts, before any I/O: a cold fault
// that waits for its page is retried and fires again once the page is
// there.
SEC("raw_tp/mm_filemap_fault")
int BPF_PROG(handle_fault, struct address_space *mapping, unsigned long index)
{
	return emit_fault(KIND_FAULT, BPF_CORE_READ(mapping, host), index, 1, NULL);
}

// Folio layouts. The flags word is an unsigned long, a memdesc_flags_t
// (a struct holding one) since 6.17; a large folio's order is
// _folio_order before 6.6, the low byte of _flags_1 since.
struct folio___flagsword {
	unsigned long flags;
} __attribute__((preserve_access_index));

struct folio___61 {
	unsigned char _folio_order;
} __attribute__((preserve_access_index));

// folio_pages is folio_nr_pages(folio): 1 unless PG_head is set in the
// folio's flags.
static __always_inline __u64 folio_pages(struct folio *folio)
{
	unsigned long flags = 0;
	__u32 off;

	if (bpf_core_type_exists(memdesc_flags_t))
		off = bpf_core_field_offset(struct folio, flags);
	else
		off = bpf_core_field_offset(struct folio___flagsword, flags);
	if (bpf_probe_read_kernel(&flags, sizeof(flags), (void *)folio + off) < 0)
		return 1;
	if (!(flags & (1UL << bpf_core_enum_value(enum pageflags, PG_head))))
		return 1;
	__u64 order;
	if (bpf_core_field_exists(((struct folio___61 *)folio)->_folio_order))
		order = BPF_CORE_READ((struct folio___61 *)folio, _folio_order);
	else
		order = BPF_CORE_READ(folio, _flags_1) & 0xff;
	return 1ULL << (order & 31);
}

// mm_filemap_add_to_page_cache(struct folio *folio) (Linux 5.17).
SEC("raw_tp/mm_filemap_add_to_page_cache")
int BPF_PROG(handle_cache_add, struct folio *folio)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (!is_target(pid_tgid))
		return 0;
	struct inode *host = BPF_CORE_READ(folio, mapping, host);
	if (!host)
		return 0;
	__u64 dev = BPF_CORE_READ(host, i_sb, s_dev);
	__u64 ino = BPF_CORE_READ(host, i_ino);
	return record_event(pid_tgid, KIND_CACHE_ADD, dev, ino, BPF_CORE_READ(folio, index), folio_pages(folio));
}

// page_cache_sync_ra(struct inode *inode, pgoff_t index, struct
// file_ra_state *ra, unsigned long req_count) (Linux 6.14): the page that
// triggered readahead and the size of the request; the window the kernel
// then reads shows up as cache_add events.
SEC("raw_tp/page_cache_sync_ra")
int BPF_PROG(handle_sync_ra, struct inode *inode, unsigned long index, struct file_ra_state *ra, unsigned long req)
{
	return emit_host(KIND_RA_SYNC, inode, index, req ? req : 1);
}

// page_cache_async_ra: same arguments as page_cache_sync_ra.
SEC("raw_tp/page_cache_async_ra")
int BPF_PROG(handle_async_ra, struct inode *inode, unsigned long index, struct file_ra_state *ra, unsigned long req)
{
	return emit_host(KIND_RA_ASYNC, inode, index, req ? req : 1);
}

// Kprobe fallbacks, attached only where the tracepoint of a kind is missing
// and the kernel has kprobes (e.g. Linux 6.1, which has neither the read,
// fault and map tracepoints of 6.11 nor the readahead ones of 6.14). They
// read the same (dev, ino, page range) from the probed function's
// arguments with CO-RE and emit the same rows.

#define PAGE_SHIFT_4K 12

// filemap_read(struct kiocb *iocb, struct iov_iter *iter, ...) (5.12+):
// the pages [pos, pos + count) of one read request.
SEC("kprobe/filemap_read")
int BPF_KPROBE(kprobe_read, struct kiocb *iocb, struct iov_iter *iter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (in_read(pid_tgid))
		return 0;
	__u64 pos = BPF_CORE_READ(iocb, ki_pos);
	__u64 count = BPF_CORE_READ(iter, count);
	if (count == 0)
		return 0;
	__u64 first = pos >> PAGE_SHIFT_4K, last = (pos + count - 1) >> PAGE_SHIFT_4K;
	return emit_read(pid_tgid, BPF_CORE_READ(iocb, ki_filp, f_mapping, host), first, last - first + 1);
}

// filemap_fault(struct vm_fault *vmf): the faulting page, with its mapping.
SEC("kprobe/filemap_fault")
int BPF_KPROBE(kprobe_fault, struct vm_fault *vmf)
{
	struct vm_area_struct *vma = BPF_CORE_READ(vmf, vma);
	struct inode *host = BPF_CORE_READ(vma, vm_file, f_mapping, host);
	return emit_fault(KIND_FAULT, host, BPF_CORE_READ(vmf, pgoff), 1, vma);
}

// filemap_map_pages(struct vm_fault *vmf, pgoff_t start, pgoff_t end): the
// fault-around window [start, end].
SEC("kprobe/filemap_map_pages")
int BPF_KPROBE(kprobe_map_pages, struct vm_fault *vmf, unsigned long start, unsigned long end)
{
	struct vm_area_struct *vma = BPF_CORE_READ(vmf, vma);
	struct inode *host = BPF_CORE_READ(vma, vm_file, f_mapping, host);
	return emit_fault(KIND_MAP, host, start, range_pages(start, end), vma);
}

// page_cache_sync_ra(struct readahead_control *ractl, unsigned long
// req_count): the page that triggered readahead and the request size.
SEC("kprobe/page_cache_sync_ra")
int BPF_KPROBE(kprobe_sync_ra, struct readahead_control *ractl, unsigned long req_count)
{
	struct inode *host = BPF_CORE_READ(ractl, mapping, host);
	return emit_host(KIND_RA_SYNC, host, BPF_CORE_READ(ractl, _index), req_count ? req_count : 1);
}

// page_cache_async_ra(struct readahead_control *ractl, struct folio *folio,
// unsigned long req_count) (5.18+).
SEC("kprobe/page_cache_async_ra")
int BPF_KPROBE(kprobe_async_ra, struct readahead_control *ractl, struct folio *folio, unsigned long req_count)
{
	struct inode *host = BPF_CORE_READ(ractl, mapping, host);
	return emit_host(KIND_RA_ASYNC, host, BPF_CORE_READ(ractl, _index), req_count ? req_count : 1);
}

// page_fault_user(unsigned long address, struct pt_regs *regs, unsigned long
// error_code) (x86): a page fault on a user address begins, taken in user
// mode; the same program is attached to page_fault_kernel, for faults the
// kernel takes on a user address (copying into a file-mapped buffer, an
// exec zeroing the binary's bss). Its file rows (fault, fault-around) get
// this time as their start and share an op; a fault the kernel retries
// (after waiting for I/O) stays one op.
SEC("raw_tp/page_fault_user")
int BPF_PROG(handle_page_fault, unsigned long address)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (!is_target(pid_tgid))
		return 0;
	struct tstate *t = thread_state(true);
	if (!t)
		return 0;
	t->fault_ts = bpf_ktime_get_ns();
	t->fault_op = new_op();
	t->fault_addr = address;
	t->vm_state = 0;
	return 0;
}

// sched_process_fork(struct task_struct *parent, struct task_struct *child):
// the child of a pid-set member joins the set.
SEC("raw_tp/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!(target_flags & TARGET_PIDS))
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&pids, &tgid))
		return 0;
	__u32 pid = BPF_CORE_READ(child, pid);
	__u8 one = 1;
	bpf_map_update_elem(&pids, &pid, &one, BPF_ANY);
	return 0;
}

// sched_process_exit(struct task_struct *p[, bool group_dead]): a thread's
// state goes; it leaves the pid set, and its process once the whole group
// is dead.
SEC("raw_tp/sched_process_exit")
int BPF_PROG(handle_exit, struct task_struct *p)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
	struct tstate *t = thread_state(false);
	if (t) {
		if (t->sys_ts && is_read_nr(t->nr))
			set_inread(t, tid, false); // it dies inside a read
		bpf_task_storage_delete(&threads, bpf_get_current_task_btf());
	}
	if (!(target_flags & TARGET_PIDS))
		return 0;
	// A thread's tid was added by the fork handler.
	if (tid != tgid)
		bpf_map_delete_elem(&pids, &tid);
	// The group dies with whichever thread exits last, often not the
	// leader (exit_group from another thread, or a leader that exited
	// first). do_exit decrements signal->live before the tracepoint
	// fires (group_dead = atomic_dec_and_test(&signal->live)), on every
	// kernel, so the thread that sees 0 is the last one. (The tracepoint's
	// group_dead argument, Linux 6.16, says the same but is not read: a
	// raw tracepoint program that reads past a kernel's arguments fails to
	// attach.)
	struct task_struct *task = bpf_get_current_task_btf();
	if (BPF_CORE_READ(task, signal, live.counter) == 0)
		bpf_map_delete_elem(&pids, &tgid);
	return 0;
}

// emit_open writes an open_event with path, a user-space string, or a
// kernel one with OPEN_KERNEL_PATH (not part of the record's flags).
#define OPEN_KERNEL_PATH 0x100

static __always_inline struct file *fd_file(long fd);
static __always_inline __u32 file_id(struct file *f, __u32 *dev, __u64 *ino);

static __always_inline int emit_open(__u64 pid_tgid, __s32 dfd, const char *path, __u32 flags, __u64 op)
{
	struct open_event *o = bpf_ringbuf_reserve(&opens, sizeof(*o), 0);
	if (!o) {
		count(CNT_OPEN_DROPS);
		return 0;
	}
	o->ts = bpf_ktime_get_ns();
	o->op = op;
	o->pid = pid_tgid >> 32;
	o->tid = (__u32)pid_tgid;
	o->dfd = dfd;
	o->flags = flags & ~OPEN_KERNEL_PATH;
	o->dir_dev = 0;
	o->pad = 0;
	o->dir_ino = 0;
	if (dfd >= 0)
		file_id(fd_file(dfd), &o->dir_dev, &o->dir_ino);
	long n;
	if (flags & OPEN_KERNEL_PATH)
		n = bpf_probe_read_kernel_str(o->path, sizeof(o->path), path);
	else
		n = bpf_probe_read_user_str(o->path, sizeof(o->path), path);
	if (n < 0)
		o->path[0] = 0;
	// In batched mode (wakeup_bytes > 0) the opens reader is woken only
	// for execs (a consumer may wait for them: source.Config.OnExec) and
	// when the ring is a quarter full; it polls on a short deadline and
	// is flushed when the decoder needs a path. Otherwise every record
	// wakes it.
	__u64 flag = 0;
	if (wakeup_bytes != 0 && !(flags & OPEN_EXEC)) {
		flag = BPF_RB_NO_WAKEUP;
		if (bpf_ringbuf_query(&opens, BPF_RB_AVAIL_DATA) >= OPENS_BYTES / 4)
			flag = BPF_RB_FORCE_WAKEUP;
	}
	bpf_ringbuf_submit(o, flag);
	return 0;
}

// sched_process_exec(struct task_struct *p, pid_t old_pid, struct
// linux_binprm *bprm): an exec event for the file the task now runs (the
// interpreter, for a script), for targets or, with exec_all, for every
// task, after an open_event with the exec's path. An exec of a file in
// exec_targets makes the task a target first.
SEC("raw_tp/sched_process_exec")
int BPF_PROG(handle_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;

	if (stopped || tgid == self_tgid)
		return 0;
	struct inode *inode = BPF_CORE_READ(bprm, file, f_inode);
	if (!inode)
		return 0;
	__u64 dev = BPF_CORE_READ(inode, i_sb, s_dev);
	__u64 ino = BPF_CORE_READ(inode, i_ino);
	bool target = is_target(pid_tgid);
	if (!target && exec_targets_active) {
		struct filekey k = {.ino = ino, .dev = (__u32)dev};
		if (bpf_map_lookup_elem(&exec_targets, &k)) {
			__u8 one = 1;
			bpf_map_update_elem(&pids, &tgid, &one, BPF_ANY);
			target = (target_flags & TARGET_PIDS) != 0;
		}
	}
	if (!target && !exec_all)
		return 0;
	// The path the exec was given (relative to the task's working
	// directory unless absolute), for user space to resolve the file by,
	// ahead of the event: a process that is no target had its execve
	// path go unreported.
	emit_open(pid_tgid, -100 /* AT_FDCWD */, BPF_CORE_READ(bprm, filename), OPEN_EXEC | OPEN_KERNEL_PATH, 0);
	return record_event(pid_tgid, KIND_EXEC, dev, ino, 0, 0);
}

#define AT_FDCWD -100
#define TS_COMPAT 0x0002 // thread_info.status: a 32-bit system call
#define S_IFMT 00170000
#define S_IFREG 0100000
#define O_DIRECT 040000
#define MAP_SHARED 0x01
#define MAP_SHARED_VALIDATE 0x03
#define MAP_ANONYMOUS 0x20

// fd_file_addr returns the address of the current task's open file fd,
// or 0. It is a global function, which the verifier checks once, on its
// own, rather than at every inlined call site on every path: loading
// task->files from the trusted task pointer makes the verifier look for a
// "task_struct__safe_trusted" type by name, a linear scan of the kernel's
// BTF (Linux 6.3 and later), and inlined that scan ran on every path
// through every call site (half the verifier's time at start-up).
__noinline __u64 fd_file_addr(long fd)
{
	if (fd < 0)
		return 0;
	// Direct loads through the task's BTF pointer (no helper calls).
	struct task_struct *task = bpf_get_current_task_btf();
	struct files_struct *files = task->files;
	if (!files)
		return 0;
	struct fdtable *fdt = files->fdt;
	if (!fdt || (unsigned long)fd >= fdt->max_fds)
		return 0;
	struct file **fds = fdt->fd;
	struct file *f = NULL;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) < 0)
		return 0;
	return (__u64)f;
}

// fd_file returns the current task's open file fd, or NULL.
static __always_inline struct file *fd_file(long fd)
{
	return (struct file *)fd_file_addr(fd);
}

// file_id sets dev and ino of f's inode and returns its mode (0 without one).
static __always_inline __u32 file_id(struct file *f, __u32 *dev, __u64 *ino)
{
	struct inode *inode = f ? BPF_CORE_READ(f, f_inode) : NULL;
	if (!inode)
		return 0;
	*dev = BPF_CORE_READ(inode, i_sb, s_dev);
	*ino = BPF_CORE_READ(inode, i_ino);
	return BPF_CORE_READ(inode, i_mode);
}

// file_view is what a read needs of its struct file: the inode, the flags
// and the position, and the path's mount and dentry (which, with the
// inode, tell a struct file reused for another open from the one a thread
// read last).
struct file_view {
	__u64 inode, mnt, dentry;
	__u32 flags;
	__s64 pos;
};

// read_file_view fills v from f in one bpf_probe_read_kernel of the
// struct (a helper call costs tens of nanoseconds here) where the fields
// lie within FILE_WINDOW bytes of each other (they do on 6.1, 6.12 and
// 6.18), else field by field.
#define FILE_WINDOW 160
static __always_inline bool read_file_view(struct file *f, struct file_view *v)
{
	__u32 oi = bpf_core_field_offset(struct file, f_inode);
	__u32 of = bpf_core_field_offset(struct file, f_flags);
	__u32 op = bpf_core_field_offset(struct file, f_pos);
	__u32 om = bpf_core_field_offset(struct file, f_path.mnt);
	__u32 od = bpf_core_field_offset(struct file, f_path.dentry);
	__u32 lo = oi < om ? oi : om;
	if (of >= lo && op >= lo && od >= lo && oi - lo + 8 <= FILE_WINDOW && of - lo + 4 <= FILE_WINDOW &&
	    op - lo + 8 <= FILE_WINDOW && om - lo + 8 <= FILE_WINDOW && od - lo + 8 <= FILE_WINDOW) {
		__u8 w[FILE_WINDOW];
		if (bpf_probe_read_kernel(w, sizeof(w), (void *)f + lo) < 0)
			return false;
		v->inode = *(__u64 *)(w + (oi - lo));
		v->flags = *(__u32 *)(w + (of - lo));
		v->pos = *(__s64 *)(w + (op - lo));
		v->mnt = *(__u64 *)(w + (om - lo));
		v->dentry = *(__u64 *)(w + (od - lo));
		return true;
	}
	v->inode = (__u64)BPF_CORE_READ(f, f_inode);
	v->flags = BPF_CORE_READ(f, f_flags);
	v->pos = BPF_CORE_READ(f, f_pos);
	v->mnt = (__u64)BPF_CORE_READ(f, f_path.mnt);
	v->dentry = (__u64)BPF_CORE_READ(f, f_path.dentry);
	return true;
}

// read_start records a read-family call on fd for its exit: the file
// (regular, not O_DIRECT: those reads do not go through the page cache)
// and the position read from: *off when the call passes an offset pointer
// (sendfile64, splice, copy_file_range), pos when it passes a position
// (pread64, preadv, preadv2 unless -1), else the file's own. A file read
// again (the same struct file, inode, mount and dentry as the thread's
// last read: a struct file reused for another open would have to name
// the same inode and dentry objects) reuses its identity read then: two
// reads of kernel memory (the descriptor table entry, the struct file).
static __always_inline bool read_start(struct tstate *t, long fd, const __s64 *off, __s64 pos)
{
	struct file *f = fd_file(fd);
	if (!f)
		return false;
	struct file_view v;
	if (!read_file_view(f, &v))
		return false;
	if ((__u64)f == t->cf_file && v.inode == t->cf_inode && v.mnt == t->cf_mnt && v.dentry == t->cf_dentry && v.inode) {
		t->dev = t->cf_dev;
		t->ino = t->cf_ino;
	} else {
		__u32 mode = 0;
		struct inode *inode = (struct inode *)v.inode;
		t->dev = 0;
		t->ino = 0;
		if (inode) {
			t->ino = BPF_CORE_READ(inode, i_ino);
			t->dev = BPF_CORE_READ(inode, i_sb, s_dev);
			mode = BPF_CORE_READ(inode, i_mode);
		}
		t->cf_file = (__u64)f;
		t->cf_inode = v.inode;
		t->cf_mnt = v.mnt;
		t->cf_dentry = v.dentry;
		t->cf_ino = t->ino;
		t->cf_dev = t->dev;
		t->cf_mode = inode && (mode & S_IFMT) == S_IFREG;
	}
	if (!t->cf_mode || (v.flags & O_DIRECT))
		return false;
	if (off) {
		if (bpf_probe_read_user(&pos, sizeof(pos), off) < 0)
			return false;
	} else if (pos < 0) {
		pos = v.pos;
	}
	t->pos = pos;
	return true;
}

// sys_enter(struct pt_regs *regs, long id) fires at the entry of every
// system call of every task; the id is checked first, so other calls cost
// only this program's first instructions. For targets it notes the calls
// whose rows the exit writes (reads of regular files, opens, stats,
// getdents64, mmap), and sends exec paths to the opens ring. 32-bit (ia32)
// system calls, whose numbers differ, are ignored.
SEC("raw_tp/sys_enter")
int BPF_PROG(handle_sys_enter, struct pt_regs *regs, long id)
{
	switch (id) {
	case NR_read: case NR_pread64: case NR_readv: case NR_preadv: case NR_preadv2:
	case NR_sendfile64: case NR_splice: case NR_copy_file_range:
	case NR_open: case NR_openat: case NR_openat2:
	case NR_newstat: case NR_newlstat: case NR_newfstatat: case NR_statx:
	case NR_access: case NR_faccessat: case NR_faccessat2:
	case NR_getdents64: case NR_mmap:
	case NR_execve: case NR_execveat:
		break;
	default:
		return 0;
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	// A thread found a target before, with the targets unchanged since,
	// skips the target check (a cgroup walk).
	struct tstate *t = thread_state(false);
	__u32 gen = target_gen;
	if (t && t->gen == gen && !stopped) {
	} else if (!target_slow(pid_tgid)) {
		return 0;
	}
	__u64 t0 = bpf_ktime_get_ns();
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->thread_info.status & TS_COMPAT)
		return 0;
	// The argument registers in one read: x86-64's struct pt_regs (the
	// ptrace ABI) has r10, r9, r8, ax, cx, dx, si, di at 56..119.
	__u64 rg[8];
	if (bpf_probe_read_kernel(rg, sizeof(rg), (void *)regs + 56) < 0)
		return 0;
	__u64 a0 = rg[7];
	if (id == NR_execve)
		return emit_open(pid_tgid, AT_FDCWD, (const char *)a0, OPEN_EXEC, 0);
	if (id == NR_execveat)
		return emit_open(pid_tgid, (__s32)a0, (const char *)rg[6], OPEN_EXEC, 0);
	if (!t && !(t = thread_state(true)))
		return 0;
	if (t->sys_ts && is_read_nr(t->nr))
		set_inread(t, (__u32)pid_tgid, false); // a read whose exit was not seen
	t->gen = gen;
	t->fault_ts = 0; // a fault in progress ended before this call
	t->a0 = a0;
	t->a1 = rg[6];
	t->a2 = rg[5];
	t->a3 = rg[0];
	t->a4 = rg[2];
	t->a5 = rg[1];
	// One call site per helper keeps the program small to verify: the
	// switch only picks the arguments.
	bool ok = true, reads = true;
	long fd = (long)a0;
	const __s64 *off = NULL;
	__s64 pos = -1;
	switch (id) {
	case NR_pread64: case NR_preadv: case NR_preadv2:
		pos = (__s64)t->a3;
		break;
	case NR_sendfile64:
		fd = (long)t->a1;
		off = (const __s64 *)t->a2;
		break;
	case NR_splice: case NR_copy_file_range:
		off = (const __s64 *)t->a1;
		break;
	case NR_read: case NR_readv:
		break;
	default:
		reads = false;
	}
	if (reads) {
		ok = read_start(t, fd, off, pos);
	} else if (id == NR_getdents64 || id == NR_mmap) {
		if (id == NR_mmap)
			fd = (t->a3 & MAP_ANONYMOUS) ? -1 : (long)t->a4;
		__u32 mode = file_id(fd_file(fd), &t->dev, &t->ino);
		ok = id == NR_getdents64 ? mode != 0 : (mode & S_IFMT) == S_IFREG;
	}
	if (!ok) {
		t->sys_ts = 0;
		t->tracer_gap += bpf_ktime_get_ns() - t0;
		return 0;
	}
	t->nr = id;
	t->sys_op = new_op();
	__u64 now = bpf_ktime_get_ns();
	__u64 cost = t->tracer_gap + (now - t0);
	t->tracer_row = cost > 0xffffffffULL ? 0xffffffff : (__u32)cost;
	t->tracer_gap = 0;
	t->calls_row = t->calls_gap + 1;
	t->calls_gap = 0;
	t->sys_ts = now;
	if (reads)
		set_inread(t, (__u32)pid_tgid, true);
	return 0;
}

// stat_id reads the file identity a successful stat-family call wrote to
// user memory: struct stat (st_dev, a user-space encoding, then st_ino),
// or struct statx (stx_ino at 32, stx_dev_major and stx_dev_minor at 136).
static __always_inline void stat_id(struct tstate *t, struct row *r)
{
	switch (t->nr) {
	case NR_newstat: case NR_newlstat: case NR_newfstatat: {
		__u64 st[2] = {};
		const void *buf = (const void *)(t->nr == NR_newfstatat ? t->a2 : t->a1);
		if (bpf_probe_read_user(st, sizeof(st), buf) == 0) {
			r->dev = (__u32)st[0];
			r->ino = st[1];
			r->flags |= EV_USERDEV;
		}
		return;
	}
	case NR_statx: {
		__u64 ino = 0;
		__u32 dev[2] = {};
		const char *buf = (const char *)t->a4;
		if (bpf_probe_read_user(&ino, sizeof(ino), buf + 32) == 0 &&
		    bpf_probe_read_user(dev, sizeof(dev), buf + 136) == 0) {
			r->ino = ino;
			r->dev = dev[0] << 20 | (dev[1] & 0xfffff);
		}
		return;
	}
	default: // access, faccessat, faccessat2: no inode to read
		r->flags |= EV_BYPATH;
	}
}

// exit_row writes the row of the noted call nr that returned ret: r holds
// its entry, exit and op. A read covers [pos, pos + ret); an open, stat or
// access sends its path to the opens ring first (the row names the file by
// inode when the call found one, else user space makes a path-only file
// row); getdents64 names the directory; mmap the mapped range and
// protection. A read that returned nothing, or a failed mmap, has no row.
// It returns 1 when the row went into the ring.
static __always_inline int exit_row(__u64 pid_tgid, struct tstate *t, struct row *r, __u32 nr, long ret)
{
	switch (nr) {
	case NR_open: case NR_openat: case NR_openat2:
		r->kind = KIND_OPEN;
		if (ret >= 0)
			file_id(fd_file(ret), &r->dev, &r->ino);
		r->flags |= EV_PATH;
		break;
	case NR_newstat: case NR_newlstat: case NR_access:
	case NR_newfstatat: case NR_statx: case NR_faccessat: case NR_faccessat2:
		r->kind = KIND_STAT;
		if (ret == 0)
			stat_id(t, r);
		r->flags |= EV_PATH;
		break;
	case NR_getdents64:
		r->kind = KIND_READDIR;
		r->dev = t->dev;
		r->ino = t->ino;
		break;
	case NR_mmap:
		r->kind = KIND_MMAP;
		if (ret < 0 && ret > -4096)
			return 0;
		r->dev = t->dev;
		r->ino = t->ino;
		r->index = t->a5 >> PAGE_SHIFT_4K;
		r->npages = (t->a1 + 4095) >> PAGE_SHIFT_4K;
		r->prot = t->a2 & 7;
		if ((t->a3 & MAP_SHARED_VALIDATE) == MAP_SHARED || (t->a3 & MAP_SHARED_VALIDATE) == MAP_SHARED_VALIDATE)
			r->prot |= 8;
		r->map_pgoff = r->index;
		r->map_pages = r->npages;
		break;
	default: // the read family
		if (ret <= 0)
			return 0;
		r->kind = KIND_READ;
		r->dev = t->dev;
		r->ino = t->ino;
		r->index = t->pos >> PAGE_SHIFT_4K;
		r->npages = range_pages(r->index, (t->pos + ret - 1) >> PAGE_SHIFT_4K);
	}
	if (r->flags & EV_PATH) {
		// open(path), stat(path), lstat(path), access(path): a0; the *at
		// calls: dirfd a0, path a1.
		bool at = nr != NR_open && nr != NR_newstat && nr != NR_newlstat && nr != NR_access;
		emit_open(pid_tgid, at ? (__s32)t->a0 : AT_FDCWD, (const char *)(at ? t->a1 : t->a0), OPEN_ROW, r->op);
	}
	return record_row(pid_tgid, r);
}

// sys_exit(struct pt_regs *regs, long ret): the exit of a call sys_enter
// noted writes its row (exit_row): ts its entry, end now, its op, result
// and tracer_ns. What this program does after end (the row, its path) is
// the tracer's time in the thread's next think time: it goes to
// tracer_gap, which the next noted call's row carries. What the BPF
// programs cannot time, the kernel's syscall tracing slow path and their
// own dispatch, is counted in calls (tracer_calls); user space measures
// its cost per call (source.SyscallNS).
SEC("raw_tp/sys_exit")
int BPF_PROG(handle_sys_exit, struct pt_regs *regs, long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tstate *t = thread_state(false);
	if (!t)
		return 0;
	if (!t->sys_ts) {
		t->calls_gap++; // a call of a traced thread that has no row
		return 0;
	}
	__u32 nr = t->nr;
	__u64 orig_ax = 0; // x86-64 pt_regs: at 120
	bpf_probe_read_kernel(&orig_ax, sizeof(orig_ax), (void *)regs + 120);
	if (orig_ax != nr) {
		t->calls_gap++;
		return 0;
	}
	struct row r = {.ts = t->sys_ts, .end = bpf_ktime_get_ns(), .op = t->sys_op, .ret = ret, .flags = EV_SYSCALL,
			.tracer_ns = t->tracer_row, .tracer_calls = t->calls_row};
	t->sys_ts = 0;
	if (is_read_nr(nr))
		set_inread(t, (__u32)pid_tgid, false);
	if (t->fault_ts >= r.ts)
		t->fault_ts = 0; // a fault within the call ended with it
	if (!exit_row(pid_tgid, t, &r, nr, ret)) {
		// No row (a read at EOF, a filtered file): the next row's think
		// time holds this call, so its tracer_ns and tracer_calls do too.
		t->tracer_gap += r.tracer_ns;
		t->calls_gap += r.tracer_calls;
	}
	t->tracer_gap += bpf_ktime_get_ns() - r.end;
	return 0;
}
