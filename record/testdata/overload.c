/* overload.c: the traced program of BenchmarkOverload (record/overload_test.go).
 *
 *     overload FILE SOCKET HINT_RATE EVENT_RATE EVENT_THREADS DURATION_MS
 *
 * Offers page events (4 KiB preads of FILE, one read event each) from
 * EVENT_THREADS threads and tree_child_enter hints (through
 * hints/predictio_hints.h, naming FILE) from one thread, each paced to its
 * rate per second for DURATION_MS: the work is fixed (rate x duration
 * operations), so a program slowed down finishes late. A rate of -1 means
 * flat out: preads back to back (the real path's capacity), or hints
 * resent until the recorder takes them, waiting in poll(POLLOUT) while its
 * queue is full (the recorder's capacity). 0 means none.
 *
 * Setup (open, warm-up, dial, mlockall) happens before it prints "ready"; it starts
 * on a line on stdin. At the end it retries pio_hints_flush for up to 5 s so
 * the recorder learns every drop, and prints one line of counts.
 */
#include "predictio_hints.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

static const char *path;
static int fd;
static long long pages;
static struct pio_hints *h;
static double hint_rate, event_rate;
static long event_threads;
static int64_t duration_ns, start_ns;
static uint64_t preads, hints_attempted;
static int64_t last_end;

static void pace(int64_t next)
{
	int64_t now = pio__now();
	if (next - now > 200000) {
		struct timespec ts = {0, next - now - 100000};
		nanosleep(&ts, NULL);
	}
	while (pio__now() < next)
		;
}

static void finished(void)
{
	int64_t now = pio__now(), old = __atomic_load_n(&last_end, __ATOMIC_RELAXED);
	while (now > old && !__atomic_compare_exchange_n(&last_end, &old, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static void *event_thread(void *arg)
{
	long id = (long)(intptr_t)arg;
	char buf[4096];
	uint64_t n = 0;
	if (event_rate < 0) {
		for (uint64_t k = id; pio__now() - start_ns < duration_ns; k += event_threads, n++)
			if (pread(fd, buf, sizeof(buf), (off_t)(k % pages) * 4096) != sizeof(buf))
				return (void *)1;
	} else {
		double per = event_rate / event_threads;
		uint64_t total = (uint64_t)(per * duration_ns / 1e9);
		double interval = 1e9 / per;
		for (uint64_t i = 0; i < total; i++, n++) {
			pace(start_ns + (int64_t)(i * interval));
			uint64_t k = i * event_threads + id;
			if (pread(fd, buf, sizeof(buf), (off_t)(k % pages) * 4096) != sizeof(buf))
				return (void *)1;
		}
	}
	__atomic_fetch_add(&preads, n, __ATOMIC_RELAXED);
	finished();
	return NULL;
}

static uint64_t kids[4] = {10, 11, 12, 13};

static int hint(uint64_t i)
{
	__atomic_fetch_add(&hints_attempted, 1, __ATOMIC_RELAXED);
	return pio_tree_child_enter(h, path, -1, i, 1, kids, 4);
}

static void *hint_thread(void *arg)
{
	(void)arg;
	if (hint_rate < 0) {
		/* Capacity: every hint is resent until the recorder takes it. */
		for (uint64_t i = 0; pio__now() - start_ns < duration_ns; i++) {
			for (;;) {
				uint64_t before = __atomic_load_n(&h->st.sent, __ATOMIC_RELAXED);
				if (hint(i))
					return (void *)1;
				if (__atomic_load_n(&h->st.sent, __ATOMIC_RELAXED) != before)
					break;
				struct pollfd p = {.fd = h->fd, .events = POLLOUT};
				poll(&p, 1, 100);
			}
		}
	} else {
		uint64_t total = (uint64_t)(hint_rate * duration_ns / 1e9);
		double interval = 1e9 / hint_rate;
		for (uint64_t i = 0; i < total; i++) {
			pace(start_ns + (int64_t)(i * interval));
			if (hint(i))
				return (void *)1;
		}
	}
	finished();
	return NULL;
}

static int64_t cpu_ns(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return ((int64_t)u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: overload FILE SOCKET HINT_RATE EVENT_RATE EVENT_THREADS DURATION_MS\n");
		return 2;
	}
	path = argv[1];
	hint_rate = atof(argv[3]);
	event_rate = atof(argv[4]);
	event_threads = atol(argv[5]);
	duration_ns = atoll(argv[6]) * 1000000;
	struct stat st;
	fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) || st.st_size < 4096 || event_threads < 1 || event_threads > 64) {
		perror(path);
		return 1;
	}
	pages = st.st_size / 4096;
	h = pio_hints_open(argv[2]);
	if (!h) {
		perror(argv[2]);
		return 1;
	}
	/* Warm up the code paths (their pages fault in now, not during the run). */
	char buf[4096];
	for (long long i = 0; i < pages && i < 64; i++)
		if (pread(fd, buf, sizeof(buf), (off_t)i * 4096) != sizeof(buf))
			return 1;
	preads = pages < 64 ? pages : 64;
	pace(pio__now() + 1000);
	/* Lock this program's pages and the data file's in memory: the preads
	 * stay page-cache hits (one read event each) even if another process
	 * drops caches, and no text page faults during the load. */
	if (mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED ||
	    mlockall(MCL_CURRENT)) {
		perror("lock pages");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 1;

	int64_t cpu0 = cpu_ns();
	start_ns = pio__now();
	pthread_t t[65];
	long n = 0;
	if (event_rate != 0)
		for (long i = 0; i < event_threads; i++)
			pthread_create(&t[n++], NULL, event_thread, (void *)(intptr_t)i);
	if (hint_rate != 0)
		pthread_create(&t[n++], NULL, hint_thread, NULL);
	for (long i = 0; i < n; i++) {
		void *e;
		pthread_join(t[i], &e);
		if (e) {
			fprintf(stderr, "overload: pread or hint failed\n");
			return 1;
		}
	}
	int64_t phase = (last_end ? last_end : pio__now()) - start_ns, cpu = cpu_ns() - cpu0;
	int64_t flush_start = pio__now();
	struct timespec ms1 = {0, 1000000};
	while (pio_hints_flush(h) && pio__now() - flush_start < 5000000000LL)
		nanosleep(&ms1, NULL);
	struct pio_hints_stats s;
	pio_hints_get_stats(h, &s);
	printf("phase_ns=%lld cpu_ns=%lld preads=%llu hints=%llu sent=%llu queue_full=%llu no_server=%llu reported=%llu\n",
	       (long long)phase, (long long)cpu, (unsigned long long)preads, (unsigned long long)hints_attempted,
	       (unsigned long long)s.sent, (unsigned long long)s.queue_full, (unsigned long long)s.no_server,
	       (unsigned long long)s.reported);
	fflush(stdout);
	pio_hints_close(h);
	return 0;
}
