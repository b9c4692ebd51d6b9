/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * predictio_uapi.h - the one definition of the /dev/predictio ABI.
 *
 * The kernel module (kmod/module/predictio.c) and the Go backend
 * (kmod/abi.go) both follow this file; kmod/abi_test.go compiles a C
 * program against it and checks every struct size and field offset
 * against the Go definitions.
 *
 * Protocol:
 *   1. open("/dev/predictio", O_RDWR)
 *   2. ioctl(PREDICTIO_IOC_CONFIG) to set bounds (optional; 0 keeps a field)
 *   3. ioctl(PREDICTIO_IOC_REGISTER_FD) per file: returns a slot
 *   4. mmap(PREDICTIO_RING_SIZE(ring_entries)) at offset 0: the request ring
 *   5. write entries at ring[head & (entries-1)], then store-release head
 *   6. ioctl(PREDICTIO_IOC_NOTIFY): the kernel consumes head..tail, stores
 *      tail with release semantics, and queues work; it never waits for I/O
 *   7. ioctl(PREDICTIO_IOC_STATS) reads the counters
 */
#ifndef _UAPI_PREDICTIO_H
#define _UAPI_PREDICTIO_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define PREDICTIO_ABI_VERSION 1
#define PREDICTIO_DEVICE "/dev/predictio"

/* Limits. */
#define PREDICTIO_MAX_SLOTS 1024
#define PREDICTIO_MAX_ENTRY_PAGES (1U << 20) /* one entry names at most 4 GiB of 4 KiB pages */
#define PREDICTIO_MAX_WORKERS 64
#define PREDICTIO_MAX_RING_ENTRIES (1U << 20)
#define PREDICTIO_MAX_QUEUE_CAPACITY (1U << 20)

/* Defaults. */
#define PREDICTIO_DEF_RING_ENTRIES 4096
#define PREDICTIO_DEF_QUEUE_CAPACITY 1024
#define PREDICTIO_DEF_INFLIGHT_LIMIT 8192
#define PREDICTIO_DEF_WORKERS 2
#define PREDICTIO_DEF_ITEM_PAGES 64

/* One prefetch request entry: pages first .. first+count-1 of a slot. */
struct predictio_entry {
	__u32 slot;
	__u32 count;
	__u64 first;
};

/*
 * The ring header sits at offset 0 of the mapping; entries start at
 * PREDICTIO_RING_ENTRIES_OFF. head is written by user space only (store with
 * release semantics after filling entries), tail by the kernel only (stored
 * with release semantics after the entries were copied out).
 */
struct predictio_ring_hdr {
	__u32 head;
	__u32 pad0[15]; /* head and tail on separate cache lines */
	__u32 tail;
	__u32 pad1[15];
	__u32 entries; /* power of two, read-only for user space */
	__u32 entry_size;
	__u32 abi_version;
	__u32 pad2[13];
};

#define PREDICTIO_RING_ENTRIES_OFF 4096
#define PREDICTIO_RING_SIZE(n) (PREDICTIO_RING_ENTRIES_OFF + (n) * sizeof(struct predictio_entry))

struct predictio_register {
	__s32 fd;    /* in: an open file descriptor */
	__u32 slot;  /* out: the slot that names it in entries */
};

/* Bounds. In CONFIG, a field of 0 keeps the current value; the effective
 * configuration is written back. ring_entries can change only before mmap. */
struct predictio_config {
	__u32 queue_capacity; /* work items the FIFO holds */
	__u32 inflight_limit; /* pages submitted and not yet read */
	__u32 workers;        /* kernel workers draining the FIFO */
	__u32 item_pages;     /* maximum pages per work item */
	__u32 ring_entries;   /* request ring entries (power of two) */
	__u32 flags;          /* reserved, must be 0 */
};

struct predictio_stats {
	__u64 entries_received;   /* entries consumed from the ring */
	__u64 rejected_slot;      /* unknown or unregistered slot */
	__u64 rejected_eof;       /* range starting at or past end of file */
	__u64 rejected_count;     /* count 0, above PREDICTIO_MAX_ENTRY_PAGES, or overflowing */
	__u64 rejected_index;     /* ring head more than ring_entries ahead of tail */
	__u64 pages_requested;    /* pages named by accepted entries, before clipping */
	__u64 pages_past_eof;     /* pages clipped at end of file */
	__u64 pages_submitted;    /* pages handed to readahead */
	__u64 pages_cached;       /* pages skipped: already cached or in flight */
	__u64 pages_dropped;      /* pages of dropped entries and cancelled items */
	__u64 dropped_queue_full; /* entries dropped because the FIFO was full */
	__u64 throttles;          /* times a worker waited for the in-flight limit */
	__u64 failures;           /* pages that finished without becoming uptodate, or allocation failures */
	__u64 notifies;           /* NOTIFY calls */
	__u64 items_queued;       /* work items admitted to the FIFO */
	__u64 items_done;         /* work items finished by workers */
	__u64 queue_len;          /* work items in the FIFO now */
	__u64 queue_max;          /* high-water mark of queue_len */
	__u64 inflight_pages;     /* pages submitted and not yet seen read */
	__u64 inflight_max;       /* high-water mark of inflight_pages */
	__u64 latency_ns_total;   /* sum over items of enqueue-to-submitted time */
	__u64 latency_ns_max;     /* longest item enqueue-to-submitted time */
	__u64 notify_ns_total;    /* time spent in NOTIFY (validate, split, enqueue) */
	__u64 work_ns_total;      /* time workers spent in cache checks and submission */
	__u64 readahead_ns_total; /* part of work_ns_total spent inside the kernel's readahead call */
};

#define PREDICTIO_IOC_MAGIC 0xB7
#define PREDICTIO_IOC_REGISTER_FD _IOWR(PREDICTIO_IOC_MAGIC, 1, struct predictio_register)
#define PREDICTIO_IOC_UNREGISTER _IOW(PREDICTIO_IOC_MAGIC, 2, __u32)
#define PREDICTIO_IOC_NOTIFY _IO(PREDICTIO_IOC_MAGIC, 3)
#define PREDICTIO_IOC_CONFIG _IOWR(PREDICTIO_IOC_MAGIC, 4, struct predictio_config)
#define PREDICTIO_IOC_STATS _IOR(PREDICTIO_IOC_MAGIC, 5, struct predictio_stats)

#endif /* _UAPI_PREDICTIO_H */
