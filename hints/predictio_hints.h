/* predictio_hints.h: send application hints to `predictio record`.
 *
 * Single-file, header-only client for C and C++ programs; the Go
 * equivalent is package github.com/predictio/predictio/hints. The wire
 * format (version 1, little-endian, 16-byte header + payload) is specified
 * in docs/hints.md. Linux only (Unix datagram sockets, SCM_RIGHTS); GCC or
 * Clang (__atomic builtins).
 *
 *     #include "predictio_hints.h"
 *
 *     struct pio_hints *h = pio_hints_dial("/run/predictio.sock"); // NULL, errno
 *     uint64_t kids[] = {10, 11, 12};
 *     pio_tree_child_enter(h, "/data/index.db", -1, 3, 1, kids, 3);
 *     pio_tensor_layout(h, NULL, fd, "layers.0.w", 4096, 8192);  // file by fd
 *     pio_layer_start(h, "/models/m.bin", -1, 7);
 *     pio_hints_close(h);
 *
 * Sends never block. A hint the recorder cannot take at once (its queue is
 * full because it is slow, stopped or stuck, or nothing listens) is
 * dropped and counted: pio_hints_dropped(h). The recorder learns the count
 * from a drop_report datagram sent after the next hint that goes through
 * (at most one per 10 ms), from pio_hints_flush and from pio_hints_close. After the recorder goes
 * away the handle reconnects to the same path by itself, at most once per
 * PIO_HINTS_RECONNECT_MS (default 100; #define it before the #include, or
 * call pio_hints_set_reconnect_ms, to change it).
 *
 * A file is named by path (fd ignored) or, when path is NULL, by the open
 * descriptor fd, which is passed with the datagram. Every hint call returns
 * 0 when the hint was sent or dropped, or -1 with errno set for a hint the
 * format cannot carry (EINVAL) or a bad fd (EBADF); a drop is not an error.
 * The hint calls are thread-safe; pio_hints_close must not race them.
 * Little-endian hosts only.
 *
 * API 2 (PIO_HINTS_API): handles are struct pio_hints pointers; API 1 used
 * int descriptors and blocking sends.
 */
#ifndef PREDICTIO_HINTS_H
#define PREDICTIO_HINTS_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PIO_HINTS_API 2
#define PIO_HINTS_MAGIC 0x484f4950u /* "PIOH" */
#define PIO_HINTS_VERSION 1
#define PIO_HINTS_HEADER 16
#define PIO_HINTS_MAX_DATAGRAM 16384
#define PIO_HINTS_MAX_PATH 4095
#define PIO_HINTS_MAX_CHILDREN 1024
#define PIO_HINTS_MAX_NAME 1024
#define PIO_HINTS_FLAG_FD 1
#ifndef PIO_HINTS_RECONNECT_MS
#define PIO_HINTS_RECONNECT_MS 100
#endif
#define PIO_HINTS_REPORT_NS 10000000 /* least time between drop reports */

enum pio_hint_kind {
	PIO_TREE_CHILD_ENTER = 1,
	PIO_TENSOR_LAYOUT = 2,
	PIO_LAYER_START = 3,
	PIO_DROP_REPORT = 128, /* control, not a hint: drops since the previous report */
};

/* pio_hints_stats: what a handle did with the hints it was given. */
struct pio_hints_stats {
	uint64_t sent;       /* queued on the recorder's socket */
	uint64_t queue_full; /* dropped: the recorder's queue was full */
	uint64_t no_server;  /* dropped: nothing listened at the socket */
	uint64_t reported;   /* dropped hints the recorder was told about */
	uint64_t reconnects; /* reconnect attempts that connected */
};

/* struct pio_hints is one connection; use it through the functions only. */
struct pio_hints {
	int fd;
	struct sockaddr_un addr;
	int64_t reconnect_ns;
	int64_t last_try;    /* CLOCK_MONOTONIC ns of the last reconnect attempt */
	int64_t last_report; /* ... of the last drop report queued */
	int reporting;       /* 1 while a thread sends a drop report */
	uint64_t rep_full, rep_none;
	struct pio_hints_stats st;
};

static inline int64_t pio__now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

#define pio__load(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define pio__add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)

static inline struct pio_hints *pio__new(const char *socket_path, int lazy)
{
	size_t n = strlen(socket_path);
	struct pio_hints *h;
	if (n == 0 || n >= sizeof(h->addr.sun_path)) {
		errno = n ? ENAMETOOLONG : EINVAL;
		return NULL;
	}
	h = (struct pio_hints *)calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (h->fd < 0) {
		free(h);
		return NULL;
	}
	h->addr.sun_family = AF_UNIX;
	memcpy(h->addr.sun_path, socket_path, n);
	h->reconnect_ns = (int64_t)PIO_HINTS_RECONNECT_MS * 1000000;
	h->last_try = pio__now();
	if (connect(h->fd, (struct sockaddr *)&h->addr, sizeof(h->addr)) < 0 && !lazy) {
		int e = errno;
		close(h->fd);
		free(h);
		errno = e;
		return NULL;
	}
	return h;
}

/* pio_hints_dial connects to the recorder's hint socket; NULL with errno
 * when nothing listens there (ENOENT, ECONNREFUSED) or on other errors. */
static inline struct pio_hints *pio_hints_dial(const char *socket_path)
{
	return pio__new(socket_path, 0);
}

/* pio_hints_open is pio_hints_dial that also succeeds when no recorder
 * listens yet: hints are dropped (no_server) until one does, and the
 * handle connects by itself. NULL only for a bad path or no memory. */
static inline struct pio_hints *pio_hints_open(const char *socket_path)
{
	return pio__new(socket_path, 1);
}

/* pio_hints_set_reconnect_ms sets the least time between two reconnect
 * attempts of h (default PIO_HINTS_RECONNECT_MS); call it before sending. */
static inline void pio_hints_set_reconnect_ms(struct pio_hints *h, unsigned ms)
{
	h->reconnect_ns = (int64_t)ms * 1000000;
}

/* pio_hints_dropped returns how many hints h dropped. */
static inline uint64_t pio_hints_dropped(const struct pio_hints *h)
{
	return pio__load(&h->st.queue_full) + pio__load(&h->st.no_server);
}

/* pio_hints_get_stats copies h's counters into s. */
static inline void pio_hints_get_stats(const struct pio_hints *h, struct pio_hints_stats *s)
{
	s->sent = pio__load(&h->st.sent);
	s->queue_full = pio__load(&h->st.queue_full);
	s->no_server = pio__load(&h->st.no_server);
	s->reported = pio__load(&h->st.reported);
	s->reconnects = pio__load(&h->st.reconnects);
}

/* pio__class: 0 sent or an error for the caller, 1 queue full, 2 no server. */
static inline int pio__class(int e)
{
	switch (e) {
	case EAGAIN:
#if EWOULDBLOCK != EAGAIN
	case EWOULDBLOCK:
#endif
	case ENOBUFS:
	case ENOMEM:
		return 1;
	case ECONNREFUSED:
	case ENOTCONN:
	case ECONNRESET:
	case EPIPE:
	case EDESTADDRREQ:
	case ENOENT:
		return 2;
	}
	return 0;
}

static inline int pio__sendmsg(int fd, struct msghdr *m)
{
	ssize_t r;
	do
		r = sendmsg(fd, m, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	return r < 0 ? errno : 0;
}

/* pio__reconnect connects h to its path again when the last attempt is
 * reconnect_ns old (one thread per interval); connect(2) of a Unix
 * datagram socket does not wait for the peer. Returns 1 when connected. */
static inline int pio__reconnect(struct pio_hints *h)
{
	int64_t now = pio__now(), last = pio__load(&h->last_try);
	if (now - last < h->reconnect_ns ||
	    !__atomic_compare_exchange_n(&h->last_try, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return 0;
	if (connect(h->fd, (struct sockaddr *)&h->addr, sizeof(h->addr)) < 0)
		return 0;
	pio__add(&h->st.reconnects, 1);
	return 1;
}

static inline void pio__put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* pio__report queues a drop_report of the drops not reported yet, at most
 * once per PIO_HINTS_REPORT_NS unless force; one thread at a time (EBUSY
 * for the others). A report that cannot be queued is not a dropped hint:
 * its counts go with the next. Returns 0 or an errno value. */
static inline int pio__report(struct pio_hints *h, int force)
{
	int64_t now = pio__now();
	int zero = 0, e;
	if (!force && now - pio__load(&h->last_report) < PIO_HINTS_REPORT_NS)
		return 0;
	if (!__atomic_compare_exchange_n(&h->reporting, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return EBUSY;
	uint64_t full = pio__load(&h->st.queue_full), none = pio__load(&h->st.no_server);
	uint8_t b[PIO_HINTS_HEADER + 16];
	uint32_t magic = PIO_HINTS_MAGIC, plen = 16;
	memset(b, 0, sizeof(b));
	memcpy(b, &magic, 4);
	b[4] = PIO_HINTS_VERSION;
	b[5] = PIO_DROP_REPORT;
	memcpy(b + 8, &plen, 4);
	pio__put64(b + 16, full - h->rep_full);
	pio__put64(b + 24, none - h->rep_none);
	struct iovec iov = {.iov_base = b, .iov_len = sizeof(b)};
	struct msghdr m;
	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	e = pio__sendmsg(h->fd, &m);
	if (e == 0) {
		pio__add(&h->st.reported, full - h->rep_full + none - h->rep_none);
		__atomic_store_n(&h->rep_full, full, __ATOMIC_RELAXED);
		__atomic_store_n(&h->rep_none, none, __ATOMIC_RELAXED);
		__atomic_store_n(&h->last_report, now, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&h->reporting, 0, __ATOMIC_RELEASE);
	return e;
}

static inline int pio__unreported(struct pio_hints *h)
{
	return pio__load(&h->rep_full) != pio__load(&h->st.queue_full) ||
	       pio__load(&h->rep_none) != pio__load(&h->st.no_server);
}

/* pio_hints_flush tells the recorder now about the drops it has not been
 * told about, without waiting: 0 when there are none or the report was
 * queued, else -1 with errno (EAGAIN while the recorder's queue is full,
 * ECONNREFUSED or ENOTCONN while none listens, EBUSY while another thread
 * reports); the counts then go with the next report. A program that wants
 * its drops known before it exits retries it for as long as it cares to. */
static inline int pio_hints_flush(struct pio_hints *h)
{
	if (!pio__unreported(h))
		return 0;
	int e = pio__report(h, 1);
	if (e && pio__class(e) && pio__reconnect(h))
		e = pio__report(h, 1);
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

/* pio_hints_close reports the drops not reported yet (one attempt, as
 * pio_hints_flush: a recorder whose queue is full then never learns them),
 * closes the socket and frees h. */
static inline int pio_hints_close(struct pio_hints *h)
{
	if (!h)
		return 0;
	if (pio__unreported(h))
		(void)pio__report(h, 1);
	int r = close(h->fd);
	free(h);
	return r;
}

/* Little-endian stores (the header documents little-endian hosts only). */
static inline uint8_t *pio__put(uint8_t *p, const void *v, size_t n)
{
	memcpy(p, v, n);
	return p + n;
}

/* pio__begin writes the header and the file reference; it returns the
 * payload cursor or NULL (errno EINVAL) when the path is unusable. */
static inline uint8_t *pio__begin(uint8_t *buf, uint8_t kind, const char *path)
{
	uint32_t magic = PIO_HINTS_MAGIC, zero = 0;
	uint16_t flags = path ? 0 : PIO_HINTS_FLAG_FD;
	uint8_t *p = buf;
	p = pio__put(p, &magic, 4);
	*p++ = PIO_HINTS_VERSION;
	*p++ = kind;
	p = pio__put(p, &flags, 2);
	p = pio__put(p, &zero, 4); /* payload_len, filled by pio__send */
	p = pio__put(p, &zero, 4); /* reserved */
	if (path) {
		size_t n = strlen(path);
		if (n == 0 || n > PIO_HINTS_MAX_PATH) {
			errno = EINVAL;
			return NULL;
		}
		uint16_t l = (uint16_t)n;
		p = pio__put(p, &l, 2);
		p = pio__put(p, path, n);
	}
	return p;
}

/* pio__send sends one hint without blocking: a full queue or a missing
 * recorder drops it (counted; one reconnect attempt per interval first). */
static inline int pio__send(struct pio_hints *h, uint8_t *buf, uint8_t *end, const char *path, int fd)
{
	uint32_t plen = (uint32_t)(end - buf - PIO_HINTS_HEADER);
	memcpy(buf + 8, &plen, 4);
	struct iovec iov = {.iov_base = buf, .iov_len = (size_t)(end - buf)};
	struct msghdr m;
	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	if (!path) {
		if (fd < 0) {
			errno = EBADF;
			return -1;
		}
		memset(&u, 0, sizeof(u));
		m.msg_control = u.b;
		m.msg_controllen = sizeof(u.b);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	int e = pio__sendmsg(h->fd, &m);
	if (e && pio__class(e) && pio__reconnect(h))
		e = pio__sendmsg(h->fd, &m);
	switch (e ? pio__class(e) : 0) {
	case 0:
		if (e) {
			errno = e;
			return -1;
		}
		pio__add(&h->st.sent, 1);
		if (pio__unreported(h))
			(void)pio__report(h, 0);
		return 0;
	case 1:
		pio__add(&h->st.queue_full, 1);
		return 0;
	default:
		pio__add(&h->st.no_server, 1);
		return 0;
	}
}

/* pio_tree_child_enter: a tree traversal enters child number position
 * (0 = first) of the node stored at page parent_page; children are the
 * upcoming child pages, the parent's children after position in the order
 * the traversal will enter them (not the child being entered). */
static inline int pio_tree_child_enter(struct pio_hints *h, const char *path, int fd, uint64_t parent_page,
				       uint32_t position, const uint64_t *children, uint32_t n_children)
{
	static __thread uint8_t buf[PIO_HINTS_MAX_DATAGRAM];
	if (n_children > PIO_HINTS_MAX_CHILDREN) {
		errno = EINVAL;
		return -1;
	}
	uint8_t *p = pio__begin(buf, PIO_TREE_CHILD_ENTER, path);
	if (!p)
		return -1;
	p = pio__put(p, &parent_page, 8);
	p = pio__put(p, &position, 4);
	p = pio__put(p, &n_children, 4);
	if (n_children)
		p = pio__put(p, children, 8 * (size_t)n_children);
	return pio__send(h, buf, p, path, fd);
}

/* pio_tensor_layout: tensor name occupies length bytes at offset. */
static inline int pio_tensor_layout(struct pio_hints *h, const char *path, int fd, const char *name,
				    uint64_t offset, uint64_t length)
{
	static __thread uint8_t buf[PIO_HINTS_MAX_DATAGRAM];
	size_t n = name ? strlen(name) : 0;
	if (n > PIO_HINTS_MAX_NAME) {
		errno = EINVAL;
		return -1;
	}
	uint8_t *p = pio__begin(buf, PIO_TENSOR_LAYOUT, path);
	if (!p)
		return -1;
	uint16_t l = (uint16_t)n;
	p = pio__put(p, &offset, 8);
	p = pio__put(p, &length, 8);
	p = pio__put(p, &l, 2);
	if (n)
		p = pio__put(p, name, n);
	return pio__send(h, buf, p, path, fd);
}

/* pio_layer_start: the program starts layer number layer of the file. */
static inline int pio_layer_start(struct pio_hints *h, const char *path, int fd, uint32_t layer)
{
	static __thread uint8_t buf[PIO_HINTS_HEADER + 2 + PIO_HINTS_MAX_PATH + 4];
	uint8_t *p = pio__begin(buf, PIO_LAYER_START, path);
	if (!p)
		return -1;
	p = pio__put(p, &layer, 4);
	return pio__send(h, buf, p, path, fd);
}

#endif /* PREDICTIO_HINTS_H */
