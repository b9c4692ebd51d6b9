//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
// bench.bpf.c: benchmark-only event source for the recorder's transport.
//
// Each getppid(2) of the benchmark process emits per_trigger synthetic read
// records into the recorder's events ring buffer (user space passes the
// recorder's map in as a replacement), so the ring -> decoder -> bundle path
// can be driven far past the ~0.8 M syscalls/s a 2-core machine can issue.
#include "record.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define MAX_PER_TRIGGER 256

volatile __u32 bench_tgid = 0; // set by user space once the load process runs
const volatile __u64 bench_ino = 1;
const volatile __u32 bench_dev = 1;
volatile __u32 per_trigger = 64;

SEC("tracepoint/syscalls/sys_enter_getppid")
int bench_emit(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if ((pid_tgid >> 32) != bench_tgid)
		return 0;
	__u32 n = per_trigger;
	__u64 now = bpf_ktime_get_ns();
	for (__u32 i = 0; i < MAX_PER_TRIGGER; i++) {
		if (i >= n)
			break;
		struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		if (!e) {
			count(CNT_DROPS);
			continue;
		}
		e->ts = now;
		e->end = 0;
		e->op = 0;
		e->ret = 0;
		e->map_pgoff = 0;
		e->map_pages = 0;
		e->prot = 0;
		e->flags = 0;
		e->tracer_ns = 0;
		e->tracer_calls = 0;
		e->ino = bench_ino;
		e->index = i;
		e->dev = bench_dev;
		e->npages = 1;
		e->pid = pid_tgid >> 32;
		e->tid = (__u32)pid_tgid;
		e->kind = KIND_READ;
		__builtin_memcpy(e->comm, "bench\0\0\0\0\0\0\0\0\0\0\0", 16);
		submit(e);
	}
	return 0;
}
