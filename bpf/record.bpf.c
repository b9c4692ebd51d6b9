//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
// record.bpf.c: page-cache access tracing for predictio record.
//
// Every filemap/readahead tracepoint handler checks that the current task is
// a target (all, a pid set maintained across fork/exit, or a cgroup v2
// subtree), applies the comm filter and the per-file deny set that user
// space fills as it resolves files, and emits one fixed-size struct event
// into the events ring buffer. openat/openat2/open of targets go to the
// opens ring buffer so user space can resolve (dev, ino) to paths.
#include "record.h"
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define MODE_ALL 0
#define MODE_PIDS 1
#define MODE_CGROUP 2

#define FILE_ALLOW 1
#define FILE_DENY 2

const volatile __u8 target_mode = MODE_PIDS;
const volatile __u8 comm_filter = 0;
const volatile __u32 self_tgid = 0;
// stopped is set by user space to end the recording before the (slow)
// detach of the tracepoints.
volatile __u32 stopped = 0;
// deny_active is set by user space once the files map holds a denied file,
// so the lookup is skipped while there is nothing to deny.
volatile __u32 deny_active = 0;

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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, char[16]);
	__type(value, __u8);
} comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144);
	__type(key, struct filekey);
	__type(value, __u8);
} files SEC(".maps");

static __always_inline bool is_target(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;

	if (stopped)
		return false;
	if (tgid == self_tgid)
		return false;
	if (target_mode == MODE_ALL)
		return true;
	if (target_mode == MODE_CGROUP)
		return bpf_current_task_under_cgroup(&cgroups, 0) == 1;
	return bpf_map_lookup_elem(&pids, &tgid) != NULL;
}

static __always_inline int emit(__u8 kind, __u64 dev, __u64 ino, __u64 index, __u64 npages)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (!is_target(pid_tgid))
		return 0;

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

SEC("tracepoint/filemap/mm_filemap_get_pages")
int handle_get_pages(struct trace_event_raw_mm_filemap_op_page_cache_range *ctx)
{
	__u64 first = ctx->index, last = ctx->last_index;
	return emit(KIND_READ, ctx->s_dev, ctx->i_ino, first, last >= first ? last - first + 1 : 1);
}

SEC("tracepoint/filemap/mm_filemap_map_pages")
int handle_map_pages(struct trace_event_raw_mm_filemap_op_page_cache_range *ctx)
{
	__u64 first = ctx->index, last = ctx->last_index;
	return emit(KIND_MAP, ctx->s_dev, ctx->i_ino, first, last >= first ? last - first + 1 : 1);
}

SEC("tracepoint/filemap/mm_filemap_fault")
int handle_fault(struct trace_event_raw_mm_filemap_fault *ctx)
{
	return emit(KIND_FAULT, ctx->s_dev, ctx->i_ino, ctx->index, 1);
}

SEC("tracepoint/filemap/mm_filemap_add_to_page_cache")
int handle_cache_add(struct trace_event_raw_mm_filemap_op_page_cache *ctx)
{
	__u64 n = 1;
	if (bpf_core_field_exists(ctx->order))
		n = 1ULL << (BPF_CORE_READ(ctx, order) & 31);
	return emit(KIND_CACHE_ADD, ctx->s_dev, ctx->i_ino, ctx->index, n);
}

// ra_pages is the size of the request that triggered readahead (req_count);
// the window the kernel then reads shows up as cache_add events.
static __always_inline __u64 ra_pages(struct trace_event_raw_page_cache_ra_op *ctx)
{
	__u64 n = 0;
	if (bpf_core_field_exists(ctx->req_count))
		n = BPF_CORE_READ(ctx, req_count);
	return n ? n : 1;
}

SEC("tracepoint/readahead/page_cache_sync_ra")
int handle_sync_ra(struct trace_event_raw_page_cache_ra_op *ctx)
{
	return emit(KIND_RA_SYNC, ctx->s_dev, ctx->i_ino, ctx->index, ra_pages(ctx));
}

SEC("tracepoint/readahead/page_cache_async_ra")
int handle_async_ra(struct trace_event_raw_page_cache_ra_op *ctx)
{
	return emit(KIND_RA_ASYNC, ctx->s_dev, ctx->i_ino, ctx->index, ra_pages(ctx));
}

// Kprobe fallbacks, attached only where the tracepoint of a kind is missing
// and the kernel has kprobes (e.g. Linux 6.1, which has neither the read,
// fault and map tracepoints of 6.11 nor the readahead ones of 6.14). They
// read the same (dev, ino, page range) from the probed function's
// arguments with CO-RE and emit the same events through emit().

#define PAGE_SHIFT_4K 12

static __always_inline int emit_host(__u8 kind, struct inode *host, __u64 index, __u64 npages)
{
	if (!host)
		return 0;
	__u64 dev = BPF_CORE_READ(host, i_sb, s_dev);
	__u64 ino = BPF_CORE_READ(host, i_ino);
	return emit(kind, dev, ino, index, npages);
}

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
	return emit_host(KIND_MAP, host, start, end >= start ? end - start + 1 : 1);
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

SEC("tracepoint/sched/sched_process_fork")
int handle_fork(struct trace_event_raw_sched_process_fork *ctx)
{
	if (target_mode != MODE_PIDS)
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&pids, &tgid))
		return 0;
	__u32 child = ctx->child_pid;
	__u8 one = 1;
	bpf_map_update_elem(&pids, &child, &one, BPF_ANY);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int handle_exit(struct trace_event_raw_sched_process_exit *ctx)
{
	if (target_mode != MODE_PIDS)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
	// A thread's tid was added by the fork handler.
	if (tid != tgid)
		bpf_map_delete_elem(&pids, &tid);
	// The group dies with whichever thread exits last, often not the
	// leader (exit_group from another thread, or a leader that exited
	// first). On kernels whose tracepoint lacks group_dead, do_exit
	// has already decremented signal->live when the tracepoint fires.
	bool dead;
	if (bpf_core_field_exists(ctx->group_dead)) {
		dead = BPF_CORE_READ(ctx, group_dead);
	} else {
		struct task_struct *task = bpf_get_current_task_btf();
		dead = BPF_CORE_READ(task, signal, live.counter) == 0;
	}
	if (dead)
		bpf_map_delete_elem(&pids, &tgid);
	return 0;
}

// sys_enter is the layout of syscalls:sys_enter_* tracepoints.
struct sys_enter {
	__u64 common;
	__s32 nr;
	__s32 pad;
	__u64 args[6];
};

static __always_inline int emit_open(__s32 dfd, const char *path, __u32 flags)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (!is_target(pid_tgid))
		return 0;
	struct open_event *o = bpf_ringbuf_reserve(&opens, sizeof(*o), 0);
	if (!o) {
		count(CNT_OPEN_DROPS);
		return 0;
	}
	o->ts = bpf_ktime_get_ns();
	o->pid = pid_tgid >> 32;
	o->tid = (__u32)pid_tgid;
	o->dfd = dfd;
	o->flags = flags;
	if (bpf_probe_read_user_str(o->path, sizeof(o->path), path) < 0)
		o->path[0] = 0;
	bpf_ringbuf_submit(o, 0);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_openat")
int handle_openat(struct sys_enter *ctx)
{
	return emit_open((__s32)ctx->args[0], (const char *)ctx->args[1], 0);
}

SEC("tracepoint/syscalls/sys_enter_openat2")
int handle_openat2(struct sys_enter *ctx)
{
	return emit_open((__s32)ctx->args[0], (const char *)ctx->args[1], 0);
}

SEC("tracepoint/syscalls/sys_enter_open")
int handle_open(struct sys_enter *ctx)
{
	return emit_open(-100 /* AT_FDCWD */, (const char *)ctx->args[0], 0);
}

SEC("tracepoint/syscalls/sys_enter_execve")
int handle_execve(struct sys_enter *ctx)
{
	return emit_open(-100 /* AT_FDCWD */, (const char *)ctx->args[0], OPEN_EXEC);
}

SEC("tracepoint/syscalls/sys_enter_execveat")
int handle_execveat(struct sys_enter *ctx)
{
	return emit_open((__s32)ctx->args[0], (const char *)ctx->args[1], OPEN_EXEC);
}
