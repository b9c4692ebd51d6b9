/* predictio_hints.h: send application hints to `predictio record`.
 *
 * Single-file, header-only client for C and C++ programs; the Go
 * equivalent is package github.com/predictio/predictio/hints. The wire
 * format (version 1, little-endian, 16-byte header + payload) is specified
 * in docs/hints.md. Linux only (Unix datagram sockets, SCM_RIGHTS).
 *
 *     #include "predictio_hints.h"
 *
 *     int h = pio_hints_dial("/run/predictio.sock");   // -1 and errno on error
 *     uint64_t kids[] = {10, 11, 12};
 *     pio_tree_child_enter(h, "/data/index.db", -1, 3, 1, kids, 3);
 *     pio_tensor_layout(h, NULL, fd, "layers.0.w", 4096, 8192);  // file by fd
 *     pio_layer_start(h, "/models/m.bin", -1, 7);
 *     pio_hints_close(h);
 *
 * A file is named by path (fd ignored) or, when path is NULL, by the open
 * descriptor fd, which is passed with the datagram. Every call returns 0 or
 * -1 with errno set (EINVAL for arguments the format cannot carry). Sends
 * block while the recorder's queue is full. Little-endian hosts only.
 */
#ifndef PREDICTIO_HINTS_H
#define PREDICTIO_HINTS_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define PIO_HINTS_MAGIC 0x484f4950u /* "PIOH" */
#define PIO_HINTS_VERSION 1
#define PIO_HINTS_HEADER 16
#define PIO_HINTS_MAX_DATAGRAM 16384
#define PIO_HINTS_MAX_PATH 4095
#define PIO_HINTS_MAX_CHILDREN 1024
#define PIO_HINTS_MAX_NAME 1024
#define PIO_HINTS_FLAG_FD 1

enum pio_hint_kind {
	PIO_TREE_CHILD_ENTER = 1,
	PIO_TENSOR_LAYOUT = 2,
	PIO_LAYER_START = 3,
};

/* pio_hints_dial connects to the recorder's hint socket. */
static inline int pio_hints_dial(const char *socket_path)
{
	struct sockaddr_un a;
	size_t n = strlen(socket_path);
	if (n >= sizeof(a.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	memcpy(a.sun_path, socket_path, n);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static inline int pio_hints_close(int h) { return close(h); }

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

static inline int pio__send(int h, uint8_t *buf, uint8_t *end, const char *path, int fd)
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
	ssize_t r;
	do
		r = sendmsg(h, &m, 0);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -1 : 0;
}

/* pio_tree_child_enter: a tree traversal enters child number position
 * (0 = first) of the node stored at page parent_page; children are the
 * upcoming child pages, the parent's children after position in the order
 * the traversal will enter them (not the child being entered). */
static inline int pio_tree_child_enter(int h, const char *path, int fd, uint64_t parent_page,
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
static inline int pio_tensor_layout(int h, const char *path, int fd, const char *name,
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
static inline int pio_layer_start(int h, const char *path, int fd, uint32_t layer)
{
	static __thread uint8_t buf[PIO_HINTS_HEADER + 2 + PIO_HINTS_MAX_PATH + 4];
	uint8_t *p = pio__begin(buf, PIO_LAYER_START, path);
	if (!p)
		return -1;
	p = pio__put(p, &layer, 4);
	return pio__send(h, buf, p, path, fd);
}

#endif /* PREDICTIO_HINTS_H */
