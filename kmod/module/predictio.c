// SPDX-License-Identifier: GPL-2.0
/*
 * predictio.c - the PredictIO kernel prefetch backend.
 *
 * /dev/predictio: each open file description is one context with its own
 * file slots, request ring, bounded work-item FIFO, in-flight tracking and
 * counters. The ABI is kmod/predictio_uapi.h.
 *
 * Submit path (ioctl NOTIFY): consume the mmapped ring, validate each entry,
 * clip it at EOF, split it into work items of at most item_pages pages and
 * admit them to the FIFO or drop the whole entry when the FIFO is full. No
 * I/O, no sleeping allocation.
 *
 * Workers (a module workqueue; each context queues up to `workers` work
 * structs): pop items, skip pages already in the page cache (resident or in
 * flight), and hand the missing runs to page_cache_ra_unbounded(), which
 * inserts locked folios and submits asynchronous reads. The in-flight limit
 * is enforced by recording every submitted run and counting a page as in
 * flight until its folio is unlocked (read finished) or gone from the cache.
 *
 * Needs Linux 6.1 (folios, page_cache_ra_unbounded with readahead_control).
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/version.h>
#include <linux/fs.h>
#include <linux/file.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/vmalloc.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <linux/uaccess.h>
#include <linux/ktime.h>
#include <linux/atomic.h>
#include <linux/xarray.h>
#include <linux/sched/mm.h>
#include <linux/delay.h>

#include "predictio_uapi.h"

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 1, 0)
#error "predictio needs Linux 6.1 or newer (folios, readahead_control)"
#endif

static struct workqueue_struct *pio_wq;

struct pio_item {
	struct file *file; /* reference held while queued */
	u64 first;
	u32 n;
	u64 enq_ns;
};

/* A run of pages handed to readahead and not yet seen finished. */
struct pio_rec {
	struct list_head node;
	struct file *file;
	pgoff_t next, end;
	bool armed; /* readahead returned; set with release semantics */
};

struct pio_ctx;

struct pio_worker {
	struct work_struct work;
	struct pio_ctx *ctx;
};

#define PIO_COUNTERS(X)                                                        \
	X(entries_received)                                                    \
	X(rejected_slot) X(rejected_eof) X(rejected_count) X(rejected_index)   \
	X(pages_requested) X(pages_past_eof) X(pages_submitted)                \
	X(pages_cached) X(pages_dropped) X(dropped_queue_full) X(throttles)    \
	X(failures) X(notifies) X(items_queued) X(items_done) X(queue_max)     \
	X(inflight_max) X(latency_ns_total) X(latency_ns_max)                  \
	X(notify_ns_total) X(work_ns_total) X(readahead_ns_total)

struct pio_counters {
#define X(name) atomic64_t name;
	PIO_COUNTERS(X)
#undef X
};

struct pio_ctx {
	struct mutex cfg_mutex; /* config, ring setup, slot registration */
	struct predictio_config cfg;

	spinlock_t slot_lock;
	struct file *slots[PREDICTIO_MAX_SLOTS];

	/* Ring: shared with user space. ring_tail is the kernel's own copy. */
	struct mutex ring_mutex; /* single consumer */
	void *ring;
	u32 ring_entries;
	u32 ring_tail;

	/* Bounded FIFO of work items. */
	spinlock_t q_lock;
	struct pio_item *q;
	u32 q_cap, q_head, q_len;

	/* In-flight tracking. */
	struct mutex if_mutex;
	struct list_head recs;
	u64 inflight;

	bool closing;
	struct pio_worker workers[PREDICTIO_MAX_WORKERS];
	struct pio_counters c;
};

static void atomic64_max(atomic64_t *v, s64 x)
{
	s64 old = atomic64_read(v);

	while (old < x) {
		s64 prev = atomic64_cmpxchg(v, old, x);

		if (prev == old)
			break;
		old = prev;
	}
}

static struct folio *pio_get_folio(struct address_space *m, pgoff_t idx)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	struct folio *f = filemap_get_folio(m, idx);

	return IS_ERR(f) ? NULL : f;
#else
	return filemap_get_folio(m, idx);
#endif
}

/* pio_present reports whether page idx has a folio in the page cache:
 * resident, or locked and being read. Shadow entries of evicted pages are
 * not present. */
static bool pio_present(struct address_space *m, pgoff_t idx)
{
	void *e;

	rcu_read_lock();
	e = xa_load(&m->i_pages, idx);
	rcu_read_unlock();
	return e && !xa_is_value(e);
}

/* pio_eof_pages returns the number of pages that hold file data. */
static u64 pio_eof_pages(struct file *f)
{
	loff_t sz = i_size_read(file_inode(f));

	return sz <= 0 ? 0 : ((u64)sz + PAGE_SIZE - 1) >> PAGE_SHIFT;
}

/* ---- in-flight accounting ---- */

static void pio_rec_free(struct pio_rec *r)
{
	list_del(&r->node);
	fput(r->file);
	kfree(r);
}

/* pio_reap retires finished pages of armed records: all of them when full,
 * else only from the oldest record up to the first still in flight (reads
 * finish roughly in order; leaving a finished record counted is
 * conservative). Caller holds if_mutex. A page is finished when its folio is unlocked (read done; not
 * uptodate means the read failed) or no longer in the cache. */
static void pio_reap(struct pio_ctx *ctx, bool full)
{
	struct pio_rec *r, *tmp;

	list_for_each_entry_safe(r, tmp, &ctx->recs, node) {
		struct address_space *m;

		if (!smp_load_acquire(&r->armed))
			continue;
		m = r->file->f_mapping;
		while (r->next < r->end) {
			struct folio *f = pio_get_folio(m, r->next);
			pgoff_t done = 1;

			if (f) {
				if (folio_test_locked(f)) {
					folio_put(f);
					break;
				}
				if (!folio_test_uptodate(f))
					atomic64_inc(&ctx->c.failures);
				/* a large folio finishes all its pages at once */
				done = folio_next_index(f) - r->next;
				if (done == 0 || done > r->end - r->next)
					done = r->end - r->next;
				folio_put(f);
			}
			r->next += done;
			ctx->inflight -= done;
		}
		if (r->next >= r->end)
			pio_rec_free(r);
		else if (!full)
			break; /* quick reap: oldest records only */
	}
}

/* pio_wait_oldest waits until the read of the oldest in-flight page ends.
 * Only workers call it; the submit path never waits for I/O. */
static void pio_wait_oldest(struct pio_ctx *ctx)
{
	struct folio *f = NULL;
	struct pio_rec *r;

	mutex_lock(&ctx->if_mutex);
	list_for_each_entry(r, &ctx->recs, node) {
		if (smp_load_acquire(&r->armed) && r->next < r->end) {
			f = pio_get_folio(r->file->f_mapping, r->next);
			break;
		}
	}
	mutex_unlock(&ctx->if_mutex);
	if (f) {
		folio_wait_locked(f);
		folio_put(f);
	} else {
		/* records not armed yet: another worker is mid-submission */
		usleep_range(50, 200);
	}
}

/* pio_reserve reserves up to want pages of the in-flight budget and
 * returns a record for them, or NULL with *got = 0 when closing or out of
 * memory. It waits (throttles) while the budget is exhausted. */
static struct pio_rec *pio_reserve(struct pio_ctx *ctx, struct file *file,
				   pgoff_t first, u64 want, u64 *got,
				   bool *throttled)
{
	struct pio_rec *r = kmalloc(sizeof(*r), GFP_KERNEL);

	*got = 0;
	if (!r) {
		atomic64_inc(&ctx->c.failures);
		return NULL;
	}
	for (;;) {
		u64 limit, avail;

		if (READ_ONCE(ctx->closing)) {
			kfree(r);
			return NULL;
		}
		mutex_lock(&ctx->if_mutex);
		limit = READ_ONCE(ctx->cfg.inflight_limit);
		pio_reap(ctx, false);
		if (ctx->inflight + want > limit)
			pio_reap(ctx, true);
		avail = ctx->inflight < limit ? limit - ctx->inflight : 0;
		if (avail > 0) {
			*got = min(avail, want);
			r->file = get_file(file);
			r->next = first;
			r->end = first + *got;
			r->armed = false;
			list_add_tail(&r->node, &ctx->recs);
			ctx->inflight += *got;
			atomic64_max(&ctx->c.inflight_max, ctx->inflight);
			mutex_unlock(&ctx->if_mutex);
			return r;
		}
		mutex_unlock(&ctx->if_mutex);
		if (!*throttled) {
			*throttled = true;
			atomic64_inc(&ctx->c.throttles);
		}
		pio_wait_oldest(ctx);
	}
}

/* ---- workers ---- */

static void pio_submit_run(struct file *file, pgoff_t first, unsigned long n)
{
	struct file_ra_state ra;
	DEFINE_READAHEAD(ractl, file, &ra, file->f_mapping, first);

	memset(&ra, 0, sizeof(ra));
	file_ra_state_init(&ra, file->f_mapping);
	page_cache_ra_unbounded(&ractl, n, 0);
}

static void pio_process(struct pio_ctx *ctx, struct pio_item *it)
{
	struct address_space *m = it->file->f_mapping;
	u64 t0 = ktime_get_ns(), eof = pio_eof_pages(it->file);
	pgoff_t idx = it->first, end = it->first + it->n;
	bool throttled = false;
	u64 cached = 0, submitted = 0;

	/* the file may have shrunk since the entry was validated */
	if (end > eof) {
		u64 cut = idx >= eof ? end - idx : end - eof;

		atomic64_add(cut, &ctx->c.pages_past_eof);
		end -= cut;
	}
	while (idx < end) {
		pgoff_t run;

		while (idx < end && pio_present(m, idx)) {
			cached++;
			idx++;
		}
		run = idx;
		while (idx < end && !pio_present(m, idx))
			idx++;
		while (run < idx) {
			u64 got;
			struct pio_rec *r = pio_reserve(ctx, it->file, run,
							idx - run, &got,
							&throttled);

			if (!r) {
				atomic64_add(end - run, &ctx->c.pages_dropped);
				goto out;
			}
			/*
			 * Recheck EOF just before reading: a truncate since the
			 * first check must not get pages past the new end.
			 * (A truncate racing with the read itself can still leave
			 * zero-filled pages past EOF, as with the kernel's own
			 * readahead; they are bounded by the in-flight limit.)
			 */
			eof = pio_eof_pages(it->file);
			if (run + got > eof) {
				u64 cut = run >= eof ? got : run + got - eof;

				mutex_lock(&ctx->if_mutex);
				got -= cut;
				r->end -= cut;
				ctx->inflight -= cut;
				mutex_unlock(&ctx->if_mutex);
			}
			if (got) {
				u64 t1 = ktime_get_ns();

				pio_submit_run(it->file, run, got);
				atomic64_add(ktime_get_ns() - t1,
					     &ctx->c.readahead_ns_total);
			}
			smp_store_release(&r->armed, true);
			submitted += got;
			run += got;
			if (run >= eof) {
				atomic64_add(end - run, &ctx->c.pages_past_eof);
				goto out;
			}
		}
	}
out:
	atomic64_add(cached, &ctx->c.pages_cached);
	atomic64_add(submitted, &ctx->c.pages_submitted);
	atomic64_add(ktime_get_ns() - t0, &ctx->c.work_ns_total);
	{
		u64 lat = ktime_get_ns() - it->enq_ns;

		atomic64_add(lat, &ctx->c.latency_ns_total);
		atomic64_max(&ctx->c.latency_ns_max, lat);
	}
	atomic64_inc(&ctx->c.items_done);
	fput(it->file);
}

static bool pio_pop(struct pio_ctx *ctx, struct pio_item *out)
{
	bool ok = false;

	spin_lock(&ctx->q_lock);
	if (ctx->q_len > 0) {
		*out = ctx->q[ctx->q_head];
		ctx->q_head = (ctx->q_head + 1) % ctx->q_cap;
		ctx->q_len--;
		ok = true;
	}
	spin_unlock(&ctx->q_lock);
	return ok;
}

static void pio_work(struct work_struct *w)
{
	struct pio_worker *pw = container_of(w, struct pio_worker, work);
	struct pio_ctx *ctx = pw->ctx;
	struct pio_item it;

	while (!READ_ONCE(ctx->closing) && pio_pop(ctx, &it)) {
		pio_process(ctx, &it);
		cond_resched();
	}
}

static void pio_kick(struct pio_ctx *ctx)
{
	u32 i, n = READ_ONCE(ctx->cfg.workers);

	for (i = 0; i < n; i++)
		queue_work(pio_wq, &ctx->workers[i].work);
}

/* ---- submit path ---- */

/* pio_admit validates one entry and admits its work items, or counts why
 * not. Runs in the NOTIFY ioctl: no sleeping, no I/O. */
static void pio_admit(struct pio_ctx *ctx, u32 slot, u32 count, u64 first,
		      u64 now)
{
	struct file *f = NULL;
	u64 eof, n, need, i, ip;

	atomic64_inc(&ctx->c.entries_received);
	if (slot < PREDICTIO_MAX_SLOTS) {
		spin_lock(&ctx->slot_lock);
		f = ctx->slots[slot];
		if (f)
			get_file(f);
		spin_unlock(&ctx->slot_lock);
	}
	if (!f) {
		atomic64_inc(&ctx->c.rejected_slot);
		return;
	}
	if (count == 0 || count > PREDICTIO_MAX_ENTRY_PAGES ||
	    first > (u64)(pgoff_t)-1 - count ||
	    first > ((u64)MAX_LFS_FILESIZE >> PAGE_SHIFT)) {
		atomic64_inc(&ctx->c.rejected_count);
		goto put;
	}
	eof = pio_eof_pages(f);
	if (first >= eof) {
		atomic64_inc(&ctx->c.rejected_eof);
		goto put;
	}
	atomic64_add(count, &ctx->c.pages_requested);
	n = min_t(u64, count, eof - first);
	if (n < count)
		atomic64_add(count - n, &ctx->c.pages_past_eof);

	ip = READ_ONCE(ctx->cfg.item_pages);
	need = DIV_ROUND_UP(n, ip);
	spin_lock(&ctx->q_lock);
	if (ctx->q_len + need > ctx->q_cap) {
		spin_unlock(&ctx->q_lock);
		atomic64_inc(&ctx->c.dropped_queue_full);
		atomic64_add(n, &ctx->c.pages_dropped);
		goto put;
	}
	for (i = 0; i < need; i++) {
		struct pio_item *it =
			&ctx->q[(ctx->q_head + ctx->q_len) % ctx->q_cap];
		u64 off = i * ip;

		it->file = i == 0 ? f : get_file(f);
		it->first = first + off;
		it->n = min_t(u64, ip, n - off);
		it->enq_ns = now;
		ctx->q_len++;
	}
	atomic64_max(&ctx->c.queue_max, ctx->q_len);
	spin_unlock(&ctx->q_lock);
	atomic64_add(need, &ctx->c.items_queued);
	return; /* the items own the reference */
put:
	fput(f);
}

static long pio_notify(struct pio_ctx *ctx)
{
	struct predictio_ring_hdr *hdr;
	struct predictio_entry *ents;
	u64 t0 = ktime_get_ns();
	u32 head, tail, mask;
	long ret = 0;

	atomic64_inc(&ctx->c.notifies);
	mutex_lock(&ctx->ring_mutex);
	hdr = ctx->ring;
	if (!hdr) {
		mutex_unlock(&ctx->ring_mutex);
		return -ENXIO;
	}
	ents = (void *)((char *)ctx->ring + PREDICTIO_RING_ENTRIES_OFF);
	mask = ctx->ring_entries - 1;
	tail = ctx->ring_tail;
	/* pairs with the producer's store-release of head after its entries */
	head = smp_load_acquire(&hdr->head);
	if (head - tail > ctx->ring_entries) {
		/* corrupt head: the entries cannot be trusted; skip them all */
		atomic64_inc(&ctx->c.rejected_index);
		tail = head;
		ret = -EOVERFLOW;
	}
	while (tail != head) {
		struct predictio_entry *e = &ents[tail & mask];
		u32 slot = READ_ONCE(e->slot), count = READ_ONCE(e->count);
		u64 first = READ_ONCE(e->first);

		pio_admit(ctx, slot, count, first, t0);
		tail++;
		if (ret >= 0)
			ret++;
	}
	ctx->ring_tail = tail;
	/* entries are copied out: the producer may reuse their slots */
	smp_store_release(&hdr->tail, tail);
	mutex_unlock(&ctx->ring_mutex);
	pio_kick(ctx);
	atomic64_add(ktime_get_ns() - t0, &ctx->c.notify_ns_total);
	return ret;
}

/* ---- ioctls ---- */

static long pio_register(struct pio_ctx *ctx, void __user *arg)
{
	struct predictio_register reg;
	struct file *f;
	struct inode *inode;
	long ret = -ENOSPC;
	u32 i;

	if (copy_from_user(&reg, arg, sizeof(reg)))
		return -EFAULT;
	f = fget(reg.fd);
	if (!f)
		return -EBADF;
	inode = file_inode(f);
	if (!S_ISREG(inode->i_mode) || !(f->f_mode & FMODE_READ) ||
	    !f->f_mapping || !f->f_mapping->a_ops ||
	    (!f->f_mapping->a_ops->readahead &&
	     !f->f_mapping->a_ops->read_folio)) {
		fput(f);
		return -EINVAL;
	}
	spin_lock(&ctx->slot_lock);
	for (i = 0; i < PREDICTIO_MAX_SLOTS; i++) {
		if (!ctx->slots[i]) {
			ctx->slots[i] = f;
			ret = 0;
			break;
		}
	}
	spin_unlock(&ctx->slot_lock);
	if (ret) {
		fput(f);
		return ret;
	}
	reg.slot = i;
	if (copy_to_user(arg, &reg, sizeof(reg))) {
		bool ours;

		/*
		 * Another thread may have unregistered slot i (dropping this
		 * registration's reference) and reused it while we faulted:
		 * undo only a slot that still holds this file.
		 */
		spin_lock(&ctx->slot_lock);
		ours = ctx->slots[i] == f;
		if (ours)
			ctx->slots[i] = NULL;
		spin_unlock(&ctx->slot_lock);
		if (ours)
			fput(f);
		return -EFAULT;
	}
	return 0;
}

static long pio_unregister(struct pio_ctx *ctx, void __user *arg)
{
	struct file *f = NULL;
	u32 slot;

	if (copy_from_user(&slot, arg, sizeof(slot)))
		return -EFAULT;
	if (slot >= PREDICTIO_MAX_SLOTS)
		return -EINVAL;
	spin_lock(&ctx->slot_lock);
	f = ctx->slots[slot];
	ctx->slots[slot] = NULL;
	spin_unlock(&ctx->slot_lock);
	if (!f)
		return -ENOENT;
	fput(f); /* queued items and in-flight records hold their own */
	return 0;
}

static long pio_config(struct pio_ctx *ctx, void __user *arg)
{
	struct predictio_config in;
	long ret = 0;

	if (copy_from_user(&in, arg, sizeof(in)))
		return -EFAULT;
	if (in.flags ||
	    in.queue_capacity > PREDICTIO_MAX_QUEUE_CAPACITY ||
	    in.workers > PREDICTIO_MAX_WORKERS ||
	    in.item_pages > PREDICTIO_MAX_ENTRY_PAGES ||
	    in.ring_entries > PREDICTIO_MAX_RING_ENTRIES ||
	    (in.ring_entries && (in.ring_entries & (in.ring_entries - 1))))
		return -EINVAL;

	mutex_lock(&ctx->cfg_mutex);
	if (in.ring_entries && in.ring_entries != ctx->cfg.ring_entries) {
		if (ctx->ring) {
			ret = -EBUSY;
			goto out;
		}
		ctx->cfg.ring_entries = in.ring_entries;
	}
	if (in.queue_capacity && in.queue_capacity != ctx->q_cap) {
		struct pio_item *nq, *oq;
		u32 i;

		nq = kvcalloc(in.queue_capacity, sizeof(*nq), GFP_KERNEL);
		if (!nq) {
			ret = -ENOMEM;
			goto out;
		}
		spin_lock(&ctx->q_lock);
		if (ctx->q_len > in.queue_capacity) {
			spin_unlock(&ctx->q_lock);
			kvfree(nq);
			ret = -EBUSY;
			goto out;
		}
		for (i = 0; i < ctx->q_len; i++)
			nq[i] = ctx->q[(ctx->q_head + i) % ctx->q_cap];
		oq = ctx->q;
		ctx->q = nq;
		ctx->q_head = 0;
		ctx->q_cap = in.queue_capacity;
		spin_unlock(&ctx->q_lock);
		kvfree(oq);
		ctx->cfg.queue_capacity = in.queue_capacity;
	}
	if (in.inflight_limit)
		WRITE_ONCE(ctx->cfg.inflight_limit, in.inflight_limit);
	if (in.workers)
		WRITE_ONCE(ctx->cfg.workers, in.workers);
	if (in.item_pages)
		WRITE_ONCE(ctx->cfg.item_pages, in.item_pages);
out:
	in = ctx->cfg;
	mutex_unlock(&ctx->cfg_mutex);
	if (copy_to_user(arg, &in, sizeof(in)))
		return -EFAULT;
	return ret;
}

static long pio_stats(struct pio_ctx *ctx, void __user *arg)
{
	struct predictio_stats s;

	memset(&s, 0, sizeof(s));
#define X(name) s.name = atomic64_read(&ctx->c.name);
	PIO_COUNTERS(X)
#undef X
	spin_lock(&ctx->q_lock);
	s.queue_len = ctx->q_len;
	spin_unlock(&ctx->q_lock);
	mutex_lock(&ctx->if_mutex);
	pio_reap(ctx, true);
	s.inflight_pages = ctx->inflight;
	mutex_unlock(&ctx->if_mutex);
	if (copy_to_user(arg, &s, sizeof(s)))
		return -EFAULT;
	return 0;
}

static long pio_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct pio_ctx *ctx = filp->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case PREDICTIO_IOC_REGISTER_FD:
		return pio_register(ctx, uarg);
	case PREDICTIO_IOC_UNREGISTER:
		return pio_unregister(ctx, uarg);
	case PREDICTIO_IOC_NOTIFY:
		return pio_notify(ctx);
	case PREDICTIO_IOC_CONFIG:
		return pio_config(ctx, uarg);
	case PREDICTIO_IOC_STATS:
		return pio_stats(ctx, uarg);
	}
	return -ENOTTY;
}

/* ---- file operations ---- */

static int pio_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct pio_ctx *ctx = filp->private_data;
	unsigned long want;
	int ret;

	if (vma->vm_pgoff != 0 || !(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	mutex_lock(&ctx->cfg_mutex);
	want = PAGE_ALIGN(PREDICTIO_RING_SIZE((unsigned long)ctx->cfg.ring_entries));
	if (vma->vm_end - vma->vm_start != want) {
		ret = -EINVAL;
		goto out;
	}
	mutex_lock(&ctx->ring_mutex);
	if (!ctx->ring) {
		struct predictio_ring_hdr *hdr = vmalloc_user(want);

		if (!hdr) {
			mutex_unlock(&ctx->ring_mutex);
			ret = -ENOMEM;
			goto out;
		}
		hdr->entries = ctx->cfg.ring_entries;
		hdr->entry_size = sizeof(struct predictio_entry);
		hdr->abi_version = PREDICTIO_ABI_VERSION;
		ctx->ring_entries = ctx->cfg.ring_entries;
		ctx->ring_tail = 0;
		ctx->ring = hdr;
	}
	mutex_unlock(&ctx->ring_mutex);
	ret = remap_vmalloc_range(vma, ctx->ring, 0);
out:
	mutex_unlock(&ctx->cfg_mutex);
	return ret;
}

static int pio_open(struct inode *inode, struct file *filp)
{
	struct pio_ctx *ctx = kvzalloc(sizeof(*ctx), GFP_KERNEL);
	int i;

	if (!ctx)
		return -ENOMEM;
	mutex_init(&ctx->cfg_mutex);
	mutex_init(&ctx->ring_mutex);
	mutex_init(&ctx->if_mutex);
	spin_lock_init(&ctx->slot_lock);
	spin_lock_init(&ctx->q_lock);
	INIT_LIST_HEAD(&ctx->recs);
	ctx->cfg.queue_capacity = PREDICTIO_DEF_QUEUE_CAPACITY;
	ctx->cfg.inflight_limit = PREDICTIO_DEF_INFLIGHT_LIMIT;
	ctx->cfg.workers = PREDICTIO_DEF_WORKERS;
	ctx->cfg.item_pages = PREDICTIO_DEF_ITEM_PAGES;
	ctx->cfg.ring_entries = PREDICTIO_DEF_RING_ENTRIES;
	ctx->q_cap = ctx->cfg.queue_capacity;
	ctx->q = kvcalloc(ctx->q_cap, sizeof(*ctx->q), GFP_KERNEL);
	if (!ctx->q) {
		kvfree(ctx);
		return -ENOMEM;
	}
	for (i = 0; i < PREDICTIO_MAX_WORKERS; i++) {
		INIT_WORK(&ctx->workers[i].work, pio_work);
		ctx->workers[i].ctx = ctx;
	}
	filp->private_data = ctx;
	return 0;
}

/* pio_release runs when the last reference to the open file goes: no
 * mapping of the ring remains. Queued items are cancelled and counted;
 * running workers stop after their current run; reads already submitted
 * finish on their own (their completion does not call into this module). */
static int pio_release(struct inode *inode, struct file *filp)
{
	struct pio_ctx *ctx = filp->private_data;
	struct pio_item it;
	struct pio_rec *r, *tmp;
	int i;

	WRITE_ONCE(ctx->closing, true);
	for (i = 0; i < PREDICTIO_MAX_WORKERS; i++)
		cancel_work_sync(&ctx->workers[i].work);
	while (pio_pop(ctx, &it)) {
		atomic64_add(it.n, &ctx->c.pages_dropped);
		fput(it.file);
	}
	mutex_lock(&ctx->if_mutex);
	list_for_each_entry_safe(r, tmp, &ctx->recs, node)
		pio_rec_free(r);
	mutex_unlock(&ctx->if_mutex);
	for (i = 0; i < PREDICTIO_MAX_SLOTS; i++)
		if (ctx->slots[i])
			fput(ctx->slots[i]);
	vfree(ctx->ring);
	kvfree(ctx->q);
	kvfree(ctx);
	return 0;
}

static const struct file_operations pio_fops = {
	.owner = THIS_MODULE,
	.open = pio_open,
	.release = pio_release,
	.unlocked_ioctl = pio_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = pio_mmap,
	.llseek = noop_llseek,
};

static struct miscdevice pio_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "predictio",
	.fops = &pio_fops,
	.mode = 0600,
};

static int __init pio_init(void)
{
	int ret;

	BUILD_BUG_ON(sizeof(struct predictio_entry) != 16);
	BUILD_BUG_ON(sizeof(struct predictio_ring_hdr) > PREDICTIO_RING_ENTRIES_OFF);
	pio_wq = alloc_workqueue("predictio", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!pio_wq)
		return -ENOMEM;
	ret = misc_register(&pio_misc);
	if (ret) {
		destroy_workqueue(pio_wq);
		return ret;
	}
	pr_info("predictio: /dev/predictio ready (ABI %d)\n", PREDICTIO_ABI_VERSION);
	return 0;
}

static void __exit pio_exit(void)
{
	misc_deregister(&pio_misc);
	destroy_workqueue(pio_wq);
	pr_info("predictio: unloaded\n");
}

module_init(pio_init);
module_exit(pio_exit);
MODULE_LICENSE("GPL");
MODULE_AUTHOR("predictio");
MODULE_DESCRIPTION("PredictIO bounded asynchronous page-cache prefetch backend");
MODULE_VERSION("1");
