//go:build ignore
// SPDX-License-Identifier: (MIT OR GPL-2.0)
// effect.bpf.c: prefetch effect accounting (package effect).
//
// For the watched files (dev, ino) it follows every page-cache insert: a
// page a prefetcher inserted (a thread of a prefetcher process that is not
// a demand thread, or a kernel thread where allowed) is pending until its
// first demand lookup, which classifies it: used in time when the folio
// was up to date then (its read had completed), late when it was not (the
// demand waited for it), or when the prefetcher inserted it while a demand
// for it was already under way. A pending page evicted first is wasted;
// pages still pending at the end are wasted too (user space counts them).
//
// Demand lookups: read-family syscall entries (read, pread64, readv,
// preadv, preadv2), file faults (mm_filemap_fault, at the fault's entry)
// and fault-around mappings (mm_filemap_map_pages, which maps only up to
// date pages). Needs Linux 5.17 (bpf_loop), BTF and tp_btf.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define PAGE_SHIFT 12
#define PF_KTHREAD 0x00200000
// Most pages one lookup classifies (a larger read's tail is left pending).
#define MAX_LOOKUP 4096
// Most iovecs of a readv-family call summed for its length.
#define MAX_IOV 8
// A fault's demand window: a prefetch insert of the faulting page within
// it is late.
#define FAULT_WINDOW_NS 2000000ULL

struct file_key {
	__u64 ino;
	__u32 dev; // s_dev, major<<20 | minor
	__u32 pad;
};

struct page_key {
	__u32 slot;
	__u32 pad;
	__u64 index;
};

struct pending_page {
	__u64 folio; // the inserted folio, to match evictions
	__u64 ts;
};

// file_counts are pages per watched file; user space sums them.
struct file_counts {
	__u64 prefetched;  // inserted by a prefetcher and tracked
	__u64 in_time;     // up to date at their first demand lookup
	__u64 late;        // not up to date then, or inserted during the demand
	__u64 evicted;     // evicted while pending
	__u64 demand_read; // inserted by demand threads (their misses)
	__u64 foreign;     // inserted by anybody else
	__u64 untracked;   // inserted by a prefetcher but the pending table was full
	__s64 pending;     // pending now
};

// active_demand is the demand under way on a file: a read syscall between
// entry and exit, or a fault for FAULT_WINDOW_NS.
struct active_demand {
	__u64 first, last;
	__u64 ts;
	__u32 tid;
	__u32 fault;
};

_Static_assert(__builtin_offsetof(struct folio, flags) == 0, "folio flags are the first word");

const struct file_counts *unused_counts __attribute__((unused));
const struct page_key *unused_page __attribute__((unused));
const struct pending_page *unused_pending __attribute__((unused));
const struct file_key *unused_file __attribute__((unused));

// kthread_prefetch: inserts by kernel threads count as prefetches (the
// predictio module's workers).
const volatile __u32 kthread_prefetch = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct file_key);
	__type(value, __u32); // slot
} watched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct file_counts);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, struct page_key);
	__type(value, struct pending_page);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct active_demand);
} active SEC(".maps");

// reading maps a demand thread in a read syscall to the file's slot.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u32);
} reading SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} demand_tids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} demand_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} prefetch_pids SEC(".maps");

static __always_inline int is_demand(__u64 pid_tgid)
{
	__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
	return bpf_map_lookup_elem(&demand_tids, &tid) || bpf_map_lookup_elem(&demand_pids, &tgid);
}

static __always_inline __u32 *slot_of(__u64 dev, __u64 ino)
{
	struct file_key k = {.ino = ino, .dev = (__u32)dev};
	return bpf_map_lookup_elem(&watched, &k);
}

static __always_inline __u32 *slot_of_host(struct inode *host)
{
	if (!host)
		return NULL;
	return slot_of(BPF_CORE_READ(host, i_sb, s_dev), BPF_CORE_READ(host, i_ino));
}

// folio_flags reads a folio's flags word. It is the first word of struct
// folio (and of struct page) in every kernel: an unsigned long before Linux
// 6.18, memdesc_flags_t since, whose types CO-RE cannot relocate one to the
// other, so it is read at offset 0.
static __always_inline __u64 folio_flags(__u64 folio)
{
	__u64 flags = 0;
	bpf_probe_read_kernel(&flags, sizeof(flags), (void *)folio);
	return flags;
}

// folio___61 is struct folio before Linux 6.6, whose order had a field.
struct folio___61 {
	unsigned char _folio_order;
} __attribute__((preserve_access_index));

static __always_inline __u64 folio_nr(struct folio *folio)
{
	__u64 flags = folio_flags((__u64)folio);
	if (!(flags & (1ULL << bpf_core_enum_value(enum pageflags, PG_head))))
		return 1;
	if (bpf_core_field_exists(((struct folio___61 *)folio)->_folio_order))
		return 1ULL << (BPF_CORE_READ((struct folio___61 *)folio, _folio_order) & 31);
	__u64 f1 = BPF_CORE_READ(folio, _flags_1);
	return 1ULL << (f1 & 0xff);
}

// Inserts.

struct insert_ctx {
	struct file_counts *c;
	__u64 folio, ts, index;
	__u32 slot;
	struct active_demand *a;
};

static long insert_one(__u32 i, void *data)
{
	struct insert_ctx *x = data;
	__u64 p = x->index + i;
	struct active_demand *a = x->a;
	if (a && p >= a->first && p <= a->last && (!a->fault || x->ts - a->ts < FAULT_WINDOW_NS)) {
		// A demand for this page is under way: it waits for this read.
		__sync_fetch_and_add(&x->c->prefetched, 1);
		__sync_fetch_and_add(&x->c->late, 1);
		return 0;
	}
	struct page_key k = {.slot = x->slot, .index = p};
	struct pending_page v = {.folio = x->folio, .ts = x->ts};
	if (bpf_map_update_elem(&pending, &k, &v, BPF_ANY)) {
		__sync_fetch_and_add(&x->c->untracked, 1);
		return 0;
	}
	__sync_fetch_and_add(&x->c->prefetched, 1);
	__sync_fetch_and_add(&x->c->pending, 1);
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(effect_add, struct folio *folio)
{
	struct inode *host = BPF_CORE_READ(folio, mapping, host);
	__u32 *slot = slot_of_host(host);
	if (!slot)
		return 0;
	__u32 s = *slot;
	struct file_counts *c = bpf_map_lookup_elem(&counts, &s);
	if (!c)
		return 0;
	__u64 nr = folio_nr(folio);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (is_demand(pid_tgid)) {
		__sync_fetch_and_add(&c->demand_read, nr);
		return 0;
	}
	__u32 tgid = pid_tgid >> 32;
	struct task_struct *task = bpf_get_current_task_btf();
	int prefetcher = bpf_map_lookup_elem(&prefetch_pids, &tgid) != NULL;
	if (!prefetcher && kthread_prefetch && (BPF_CORE_READ(task, flags) & PF_KTHREAD))
		prefetcher = 1;
	if (!prefetcher) {
		__sync_fetch_and_add(&c->foreign, nr);
		return 0;
	}
	struct insert_ctx x = {.c = c, .folio = (__u64)folio, .ts = bpf_ktime_get_ns(), .index = BPF_CORE_READ(folio, index), .slot = s};
	x.a = bpf_map_lookup_elem(&active, &s);
	bpf_loop(nr < 1024 ? nr : 1024, insert_one, &x, 0);
	return 0;
}

// Evictions.

struct evict_ctx {
	struct file_counts *c;
	__u64 folio, index;
	__u32 slot;
};

static long evict_one(__u32 i, void *data)
{
	struct evict_ctx *x = data;
	struct page_key k = {.slot = x->slot, .index = x->index + i};
	struct pending_page *v = bpf_map_lookup_elem(&pending, &k);
	if (!v || v->folio != x->folio)
		return 0;
	if (bpf_map_delete_elem(&pending, &k) == 0) {
		__sync_fetch_and_add(&x->c->evicted, 1);
		__sync_fetch_and_add(&x->c->pending, -1);
	}
	return 0;
}

SEC("tp_btf/mm_filemap_delete_from_page_cache")
int BPF_PROG(effect_delete, struct folio *folio)
{
	struct inode *host = BPF_CORE_READ(folio, mapping, host);
	__u32 *slot = slot_of_host(host);
	if (!slot)
		return 0;
	__u32 s = *slot;
	struct file_counts *c = bpf_map_lookup_elem(&counts, &s);
	if (!c || c->pending <= 0)
		return 0;
	struct evict_ctx x = {.c = c, .folio = (__u64)folio, .index = BPF_CORE_READ(folio, index), .slot = s};
	__u64 nr = folio_nr(folio);
	bpf_loop(nr < 1024 ? nr : 1024, evict_one, &x, 0);
	return 0;
}

// Demand lookups.

struct lookup_ctx {
	struct file_counts *c;
	__u64 first;
	__u32 slot;
	__u32 mapped; // fault-around: only up to date pages count, others stay pending
};

static long lookup_one(__u32 i, void *data)
{
	struct lookup_ctx *x = data;
	struct page_key k = {.slot = x->slot, .index = x->first + i};
	struct pending_page *v = bpf_map_lookup_elem(&pending, &k);
	if (!v)
		return 0;
	int uptodate = (folio_flags(v->folio) >> bpf_core_enum_value(enum pageflags, PG_uptodate)) & 1;
	if (x->mapped && !uptodate)
		return 0;
	if (bpf_map_delete_elem(&pending, &k) != 0)
		return 0; // classified by a concurrent lookup
	__sync_fetch_and_add(uptodate ? &x->c->in_time : &x->c->late, 1);
	__sync_fetch_and_add(&x->c->pending, -1);
	if (x->c->pending <= 0)
		return 1;
	return 0;
}

// lookup classifies the pending pages of [first, last] of slot s.
static __always_inline void lookup(__u32 s, __u64 first, __u64 last, __u32 mapped)
{
	struct file_counts *c = bpf_map_lookup_elem(&counts, &s);
	if (!c || c->pending <= 0 || last < first)
		return;
	__u64 n = last - first + 1;
	struct lookup_ctx x = {.c = c, .first = first, .slot = s, .mapped = mapped};
	bpf_loop(n < MAX_LOOKUP ? n : MAX_LOOKUP, lookup_one, &x, 0);
}

// demand_begin marks a demand for pages [first, last] of slot s as under
// way and classifies their pending pages.
static __always_inline void demand_begin(__u32 s, __u32 tid, __u64 first, __u64 last, __u32 fault)
{
	struct active_demand a = {.first = first, .last = last, .ts = bpf_ktime_get_ns(), .tid = tid, .fault = fault};
	bpf_map_update_elem(&active, &s, &a, BPF_ANY);
	lookup(s, first, last, 0);
}

// file_of returns the current task's file of descriptor fd.
static __always_inline struct file *file_of(__u32 fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = NULL;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

// iov_len sums the lengths of the first MAX_IOV of n user iovecs.
static __always_inline __u64 iov_len(const struct iovec *iov, __u64 n)
{
	__u64 total = 0;
	for (int i = 0; i < MAX_IOV; i++) {
		if (i >= n)
			break;
		struct iovec v = {};
		if (bpf_probe_read_user(&v, sizeof(v), &iov[i]))
			break;
		total += v.iov_len;
	}
	return total;
}

// read_begin starts a read of count bytes at pos (-1: the file position)
// of descriptor fd by a demand thread.
static __always_inline int read_begin(__u32 fd, __s64 pos, __u64 count)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (count == 0 || !is_demand(pid_tgid))
		return 0;
	struct file *f = file_of(fd);
	if (!f)
		return 0;
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	__u32 *slot = slot_of_host(inode);
	if (!slot)
		return 0;
	__u32 s = *slot, tid = (__u32)pid_tgid;
	if (pos < 0)
		pos = BPF_CORE_READ(f, f_pos);
	__s64 size = BPF_CORE_READ(inode, i_size);
	if (pos >= size)
		return 0;
	__u64 end = pos + count;
	if (end > size)
		end = size;
	bpf_map_update_elem(&reading, &tid, &s, BPF_ANY);
	demand_begin(s, tid, (__u64)pos >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT, 0);
	return 0;
}

static __always_inline int read_end(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *slot = bpf_map_lookup_elem(&reading, &tid);
	if (!slot)
		return 0;
	__u32 s = *slot;
	struct active_demand *a = bpf_map_lookup_elem(&active, &s);
	if (a && a->tid == tid)
		bpf_map_delete_elem(&active, &s);
	bpf_map_delete_elem(&reading, &tid);
	return 0;
}

// x86-64 system call numbers of the read family.
#define NR_READ 0
#define NR_PREAD64 17
#define NR_READV 19
#define NR_PREADV 295
#define NR_PREADV2 327

static __always_inline int is_read(long id)
{
	return id == NR_READ || id == NR_PREAD64 || id == NR_READV || id == NR_PREADV || id == NR_PREADV2;
}

// One raw tracepoint for every system call entry and exit: cheaper than the
// per-call syscalls:* tracepoints, and the filter on the number comes
// first.
SEC("tp_btf/sys_enter")
int BPF_PROG(effect_sys_enter, struct pt_regs *regs, long id)
{
	if (!is_read(id))
		return 0;
	__u32 fd = BPF_CORE_READ(regs, di);
	__u64 arg1 = BPF_CORE_READ(regs, si), arg2 = BPF_CORE_READ(regs, dx), arg3 = BPF_CORE_READ(regs, r10);
	switch (id) {
	case NR_READ:
		return read_begin(fd, -1, arg2);
	case NR_PREAD64:
		return read_begin(fd, arg3, arg2);
	case NR_READV:
		return read_begin(fd, -1, iov_len((const struct iovec *)arg1, arg2));
	default: // preadv, preadv2 (pos -1: the file position)
		return read_begin(fd, arg3, iov_len((const struct iovec *)arg1, arg2));
	}
}

SEC("tp_btf/sys_exit")
int BPF_PROG(effect_sys_exit, struct pt_regs *regs, long ret)
{
	if (!is_read(BPF_CORE_READ(regs, orig_ax)))
		return 0;
	return read_end();
}

SEC("tracepoint/filemap/mm_filemap_fault")
int effect_fault(struct trace_event_raw_mm_filemap_fault *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_demand(pid_tgid))
		return 0;
	__u32 *slot = slot_of(ctx->s_dev, ctx->i_ino);
	if (!slot)
		return 0;
	demand_begin(*slot, (__u32)pid_tgid, ctx->index, ctx->index, 1);
	return 0;
}

SEC("tracepoint/filemap/mm_filemap_map_pages")
int effect_map(struct trace_event_raw_mm_filemap_op_page_cache_range *ctx)
{
	if (!is_demand(bpf_get_current_pid_tgid()))
		return 0;
	__u32 *slot = slot_of(ctx->s_dev, ctx->i_ino);
	if (!slot)
		return 0;
	lookup(*slot, ctx->index, ctx->last_index, 1);
	return 0;
}

// Before the filemap fault tracepoints (Linux 6.11; 6.1 has neither), kprobes on
// the functions they sit in stand in for them; the observer loads one pair
// or the other.

// filemap_fault(struct vm_fault *vmf): the faulting page, at the fault's
// entry.
SEC("kprobe/filemap_fault")
int BPF_KPROBE(effect_fault_kprobe, struct vm_fault *vmf)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_demand(pid_tgid))
		return 0;
	__u32 *slot = slot_of_host(BPF_CORE_READ(vmf, vma, vm_file, f_mapping, host));
	if (!slot)
		return 0;
	__u64 index = BPF_CORE_READ(vmf, pgoff);
	demand_begin(*slot, (__u32)pid_tgid, index, index, 1);
	return 0;
}

// filemap_map_pages(struct vm_fault *vmf, pgoff_t start, pgoff_t end): the
// fault-around window, at its entry (the pages up to date then are those
// it maps).
SEC("kprobe/filemap_map_pages")
int BPF_KPROBE(effect_map_kprobe, struct vm_fault *vmf, unsigned long start, unsigned long end)
{
	if (!is_demand(bpf_get_current_pid_tgid()))
		return 0;
	__u32 *slot = slot_of_host(BPF_CORE_READ(vmf, vma, vm_file, f_mapping, host));
	if (!slot)
		return 0;
	lookup(*slot, start, end, 1);
	return 0;
}
