// SPDX-License-Identifier: (MIT OR GPL-2.0)
// record.h: shared record layout and ring buffer of predictio's event source.
#pragma once

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

// Access kinds; the values are formats.AccessKind.
#define KIND_READ 1
#define KIND_FAULT 2
#define KIND_MAP 3
#define KIND_CACHE_ADD 4
#define KIND_RA_SYNC 5
#define KIND_RA_ASYNC 6
#define KIND_OPEN 9
#define KIND_STAT 10
#define KIND_READDIR 11
#define KIND_EXEC 12
#define KIND_MMAP 13

// event flags
#define EV_SYSCALL 1   // a row of a system call: ts is its entry, end its exit, ret its result
#define EV_PATH 2      // the opens ring carries this row's path (an open_event with the same op)
#define EV_USERDEV 4   // dev is a user-space st_dev (new_encode_dev), not major<<20 | minor
#define EV_BYPATH 8    // no inode known: user space resolves the file by the path
#define EV_FAULT 16    // a row of a user page fault: ts is the fault's entry, end this event

// Counter slots of the per-CPU counters map.
#define CNT_DROPS 0
#define CNT_SUBMITS 1 // records submitted on this CPU (submit samples the ring's fill every QUERY_EVERY)
#define CNT_OPEN_DROPS 2
#define CNT_FILTERED 3
#define CNT_MAX 4

// QUERY_EVERY: submit samples the ring's fill once per this many records
// of a CPU (a power of two).
#define QUERY_EVERY 16

// event is one row of accesses.arrow as the kernel sees it, 112 bytes, in
// the events ring buffer: a page-range access, a system call (read,
// open, stat, getdents64, mmap) or an exec.
struct event {
	__u64 ts;        // bpf_ktime_get_ns (CLOCK_MONOTONIC): the operation's start (EV_SYSCALL, EV_FAULT) or the event's time
	__u64 end;       // the operation's completion; 0 = unknown
	__u64 op;        // operation id (rows of one system call or fault share it); 0 = none
	__s64 ret;       // system call result or -errno
	__u64 ino;       // inode number
	__u64 index;     // first page index
	__u64 map_pgoff; // mapping rows: first file page of the mapping (vm_pgoff)
	__u64 map_pages; // mapping rows: the mapping's length in pages; 0 = unknown
	__u32 dev;       // s_dev, major<<20 | minor (EV_USERDEV: st_dev)
	__u32 npages;    // number of pages
	__u32 pid;       // tgid
	__u32 tid;
	__u8 kind;
	__u8 prot;       // mapping rows: formats.Prot* bits
	__u8 flags;      // EV_*
	__u8 pad;
	__u32 tracer_ns;    // system call rows: this program's own time in the thread's think time before the call (the previous noted call's exit tail, this entry's head)
	char comm[16];
	__u32 tracer_calls; // system call rows: the thread's system calls in that think time, this one included (each pays the kernel's tracing slow path)
	__u32 pad2;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// wakeup_bytes: the reader is woken only once this much data is waiting
// (BPF_RB_NO_WAKEUP otherwise) and polls on a short deadline meanwhile.
// 0 selects low-latency delivery: the kernel wakes the reader with the
// first record it has not yet consumed (the ring buffer's adaptive default).
const volatile __u64 wakeup_bytes = 256 << 10;
// wake_window: a sampled fill within [wakeup_bytes, wakeup_bytes +
// wake_window) forces the wakeup; user space sets it to what all CPUs
// can add between two samples of one (QUERY_EVERY records each).
const volatile __u64 wake_window = 2 * QUERY_EVERY * (8 + 112);
// reader_polling is set by user space while a low-latency reader polls the
// ring on its own (events are coming densely): submit then wakes nobody,
// which spares the traced thread a wakeup per record (irq_work, a self-IPI:
// on a virtual machine an APIC write that exits to the host).
volatile __u32 reader_polling = 0;

static __always_inline void count(__u32 slot)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &slot);
	if (c)
		*c += 1;
}

// submit commits an events record. In batched mode (wakeup_bytes > 0) it
// does not wake the reader, except when the pending data has crossed
// wakeup_bytes: the fill is sampled every QUERY_EVERY records of a CPU
// (bpf_ringbuf_query costs as much as reserving a record here), and a
// sample within the window after the threshold forces one wakeup. A
// crossing the samples miss is caught by the reader's poll. In low-latency
// mode it wakes the reader (the kernel's adaptive default: only a reader
// that has caught up), unless the reader is polling.
static __always_inline void submit(void *rec)
{
	if (wakeup_bytes == 0) {
		bpf_ringbuf_submit(rec, reader_polling ? BPF_RB_NO_WAKEUP : 0);
		return;
	}
	__u64 flag = BPF_RB_NO_WAKEUP;
	__u32 k = CNT_SUBMITS;
	__u64 *c = bpf_map_lookup_elem(&counters, &k);
	if (c && (++*c & (QUERY_EVERY - 1)) == 0) {
		__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
		if (avail >= wakeup_bytes && avail < wakeup_bytes + wake_window)
			flag = BPF_RB_FORCE_WAKEUP;
	}
	bpf_ringbuf_submit(rec, flag);
}
