// lru.c runs a trace of page numbers through libCacheSim's LRU, through its
// library (not its cachesim CLI, whose hash table is fixed at 2^24
// buckets), for scripts/libcachesim-ab.sh (docs/BENCHMARKS.md, issue 14).
//
//   lru TRACE [CACHE_OBJECTS]
//
// TRACE is a file of little-endian uint64 page numbers, one request each;
// CACHE_OBJECTS (default 65536, 256 MiB of 4 KiB pages) is the cache size
// in objects of size 1. The hash table has 2^(ceil(log2(CACHE_OBJECTS))+1)
// buckets: sized to the cache, so it never grows, and at most half full.
// It prints one JSON line:
//
//   {"requests":N,"misses":M,"seconds":S,"req_per_s":R,"whole_seconds":W,"whole_req_per_s":WR}
//
// S times the request loop only (every request through cache->get); W
// runs from the process's start (its start time in /proc/self/stat, so
// exec and dynamic linking count; kernel clock ticks, 10 ms) to the end,
// the mmap, the page faults of the trace, the cache's set-up and teardown
// included.
//
// Build (scripts/libcachesim-ab.sh does), on one line:
//   cc -O2 -I$LCS_SRC/libCacheSim/include $(pkg-config --cflags glib-2.0) -o lru lru.c
//      $LCS_BUILD/liblibCacheSim.a $(pkg-config --libs glib-2.0) -lzstd -lm -lpthread -ldl -lstdc++
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "libCacheSim.h"

static double now(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

// process_start returns the process's start time on CLOCK_BOOTTIME's
// scale (field 22 of /proc/self/stat, in clock ticks since boot), or -1.
static double process_start(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (f == NULL) return -1;
  char buf[4096];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); // comm may hold spaces
  if (p == NULL) return -1;
  // After ")": field 3 (state) ... field 22 (starttime).
  unsigned long long start = 0;
  int field = 2;
  for (char *tok = strtok(p + 1, " "); tok != NULL; tok = strtok(NULL, " ")) {
    if (++field == 22) {
      start = strtoull(tok, NULL, 10);
      break;
    }
  }
  if (field != 22) return -1;
  return (double)start / (double)sysconf(_SC_CLK_TCK);
}

int main(int argc, char **argv) {
  double t_main = now(CLOCK_BOOTTIME);
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s TRACE [CACHE_OBJECTS]\n", argv[0]);
    return 2;
  }
  uint64_t objects = 65536;
  if (argc == 3) {
    char *end;
    objects = strtoull(argv[2], &end, 10);
    if (*end != 0 || objects == 0 || objects > (1ULL << 36)) {
      fprintf(stderr, "lru: CACHE_OBJECTS %s: want 1 to 2^36\n", argv[2]);
      return 2;
    }
  }
  int fd = open(argv[1], O_RDONLY);
  if (fd < 0) {
    fprintf(stderr, "lru: %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    fprintf(stderr, "lru: %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  if (st.st_size == 0 || st.st_size % 8 != 0) {
    fprintf(stderr, "lru: %s: %lld bytes, want a non-empty multiple of 8 (uint64 page numbers)\n", argv[1],
            (long long)st.st_size);
    return 1;
  }
  uint64_t n = (uint64_t)st.st_size / 8;
  const unsigned char *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (map == MAP_FAILED) {
    fprintf(stderr, "lru: mmap %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  close(fd);
  madvise((void *)map, (size_t)st.st_size, MADV_SEQUENTIAL);

  common_cache_params_t params = default_common_cache_params();
  params.cache_size = objects; // objects of size 1
  params.hashpower = 1;        // 2^hashpower buckets: the next power of two above the cache, doubled
  while ((1ULL << params.hashpower) < objects) params.hashpower++;
  params.hashpower++;
  params.consider_obj_metadata = false;
  cache_t *cache = LRU_init(params, NULL);
  request_t *req = new_request();
  req->obj_size = 1;
  req->op = OP_GET;

  uint64_t hits = 0;
  // The timed loop: every request through cache->get, nothing else.
  double t0 = now(CLOCK_MONOTONIC);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t page;
    memcpy(&page, map + 8 * i, 8); // little-endian on the hosts this runs on
    req->obj_id = page;
    req->clock_time = (int64_t)i;
    if (cache->get(cache, req)) hits++;
  }
  double loop = now(CLOCK_MONOTONIC) - t0;

  free_request(req);
  cache->cache_free(cache);
  munmap((void *)map, (size_t)st.st_size);
  double t_end = now(CLOCK_BOOTTIME);
  double start = process_start();
  if (start < 0 || start > t_main) start = t_main; // no /proc: from main
  double whole = t_end - start;
  printf("{\"requests\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"seconds\":%.6f,\"req_per_s\":%.0f,"
         "\"whole_seconds\":%.6f,\"whole_req_per_s\":%.0f,\"hashpower\":%d}\n",
         n, n - hits, loop, (double)n / loop, whole, (double)n / whole, params.hashpower);
  return 0;
}
