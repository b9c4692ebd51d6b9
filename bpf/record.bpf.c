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

struct filekey {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

#define OPEN_EXEC 1 // flags: the path was given to execve/execveat

// open_event is one open (or exec) of a path by a target, 280 bytes, in the
// opens ring.
struct open_event {
	__u64 ts;
	__u32 pid;
	__u32 tid;
	__s32 dfd;
	__u32 flags;
	char path[256];
};

// Reference the record types once so clang emits their BTF for bpf2go -type.
const struct event *unused_event __attribute__((unused));
const struct open_event *unused_open_event __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
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

static __always_inline bool is_target(__u64 pid_tgid)
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

// record_event applies the deny set and the comm filter and writes one
// event; the caller has checked the target.
static __always_inline int record_event(__u64 pid_tgid, __u8 kind, __u64 dev, __u64 ino, __u64 index, __u64 npages)
{
	if (deny_active) {
		struct filekey k = {.ino = ino, .dev = (__u32)dev};
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
	e->ts = bpf_ktime_get_ns();
	e->ino = ino;
	e->index = index;
	e->dev = (__u32)dev;
	e->npages = (__u32)npages;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->kind = kind;
	submit(e);
	return 0;
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

static __always_inline __u64 range_pages(__u64 first, __u64 last)
{
	return last >= first ? last - first + 1 : 1;
}

// mm_filemap_get_pages(struct address_space *mapping, pgoff_t index,
// pgoff_t last_index) (Linux 6.11).
SEC("raw_tp/mm_filemap_get_pages")
int BPF_PROG(handle_get_pages, struct address_space *mapping, unsigned long first, unsigned long last)
{
	return emit_host(KIND_READ, BPF_CORE_READ(mapping, host), first, range_pages(first, last));
}

// mm_filemap_map_pages(struct address_space *mapping, pgoff_t index,
// pgoff_t last_index) (Linux 6.11).
SEC("raw_tp/mm_filemap_map_pages")
int BPF_PROG(handle_map_pages, struct address_space *mapping, unsigned long first, unsigned long last)
{
	return emit_host(KIND_MAP, BPF_CORE_READ(mapping, host), first, range_pages(first, last));
}

// mm_filemap_fault(struct address_space *mapping, pgoff_t index) (Linux 6.11).
SEC("raw_tp/mm_filemap_fault")
int BPF_PROG(handle_fault, struct address_space *mapping, unsigned long index)
{
	return emit_host(KIND_FAULT, BPF_CORE_READ(mapping, host), index, 1);
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
// arguments with CO-RE and emit the same events through emit().

#define PAGE_SHIFT_4K 12

// filemap_read(struct kiocb *iocb, struct iov_iter *iter, ...) (5.12+):
// the pages [pos, pos + count) of one read request.
SEC("kprobe/filemap_read")
int BPF_KPROBE(kprobe_read, struct kiocb *iocb, struct iov_iter *iter)
{
	__u64 pos = BPF_CORE_READ(iocb, ki_pos);
	__u64 count = BPF_CORE_READ(iter, count);
	if (count == 0)
		return 0;
	__u64 first = pos >> PAGE_SHIFT_4K, last = (pos + count - 1) >> PAGE_SHIFT_4K;
	return emit_host(KIND_READ, BPF_CORE_READ(iocb, ki_filp, f_mapping, host), first, last - first + 1);
}

// filemap_fault(struct vm_fault *vmf): the faulting page.
SEC("kprobe/filemap_fault")
int BPF_KPROBE(kprobe_fault, struct vm_fault *vmf)
{
	struct inode *host = BPF_CORE_READ(vmf, vma, vm_file, f_mapping, host);
	return emit_host(KIND_FAULT, host, BPF_CORE_READ(vmf, pgoff), 1);
}

// filemap_map_pages(struct vm_fault *vmf, pgoff_t start, pgoff_t end): the
// fault-around window [start, end].
SEC("kprobe/filemap_map_pages")
int BPF_KPROBE(kprobe_map_pages, struct vm_fault *vmf, unsigned long start, unsigned long end)
{
	struct inode *host = BPF_CORE_READ(vmf, vma, vm_file, f_mapping, host);
	return emit_host(KIND_MAP, host, start, range_pages(start, end));
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

// sched_process_exit(struct task_struct *p[, bool group_dead]): a thread
// leaves the pid set, and its process once the whole group is dead.
SEC("raw_tp/sched_process_exit")
int BPF_PROG(handle_exit, struct task_struct *p)
{
	if (!(target_flags & TARGET_PIDS))
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
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

static __always_inline int emit_open(__u64 pid_tgid, __s32 dfd, const char *path, __u32 flags)
{
	struct open_event *o = bpf_ringbuf_reserve(&opens, sizeof(*o), 0);
	if (!o) {
		count(CNT_OPEN_DROPS);
		return 0;
	}
	o->ts = bpf_ktime_get_ns();
	o->pid = pid_tgid >> 32;
	o->tid = (__u32)pid_tgid;
	o->dfd = dfd;
	o->flags = flags & ~OPEN_KERNEL_PATH;
	long n;
	if (flags & OPEN_KERNEL_PATH)
		n = bpf_probe_read_kernel_str(o->path, sizeof(o->path), path);
	else
		n = bpf_probe_read_user_str(o->path, sizeof(o->path), path);
	if (n < 0)
		o->path[0] = 0;
	bpf_ringbuf_submit(o, 0);
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
	emit_open(pid_tgid, -100 /* AT_FDCWD */, BPF_CORE_READ(bprm, filename), OPEN_EXEC | OPEN_KERNEL_PATH);
	return record_event(pid_tgid, KIND_EXEC, dev, ino, 0, 0);
}

// x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
#define NR_open 2
#define NR_execve 59
#define NR_openat 257
#define NR_execveat 322
#define NR_openat2 437

#define AT_FDCWD -100
#define TS_COMPAT 0x0002 // thread_info.status: a 32-bit system call

// sys_enter(struct pt_regs *regs, long id) fires at the entry of every
// system call of every task; the id is checked first, so other calls cost
// only this program's first instructions. The paths of opens and execs of
// targets go to the opens ring. 32-bit (ia32) system calls, whose numbers
// differ, are ignored.
SEC("raw_tp/sys_enter")
int BPF_PROG(handle_sys_enter, struct pt_regs *regs, long id)
{
	if (id != NR_openat && id != NR_open && id != NR_openat2 && id != NR_execve && id != NR_execveat)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->thread_info.status & TS_COMPAT)
		return 0;
	__u64 a0 = BPF_CORE_READ(regs, di);
	switch (id) {
	case NR_open:
		return emit_open(pid_tgid, AT_FDCWD, (const char *)a0, 0);
	case NR_execve:
		return emit_open(pid_tgid, AT_FDCWD, (const char *)a0, OPEN_EXEC);
	case NR_execveat:
		return emit_open(pid_tgid, (__s32)a0, (const char *)BPF_CORE_READ(regs, si), OPEN_EXEC);
	default: // openat, openat2
		return emit_open(pid_tgid, (__s32)a0, (const char *)BPF_CORE_READ(regs, si), 0);
	}
}
