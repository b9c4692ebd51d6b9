/* stdio-trace.so: an LD_PRELOAD shim that logs the fseeko and fread calls
 * a program makes on one file, to record the order in which llama.cpp's
 * loader reads tensors without mmap (llama_file::seek and read_raw use
 * fseeko and fread). Set STDIO_TRACE_PATH to the file's path and
 * STDIO_TRACE_LOG to the log; each line is "read OFFSET LENGTH", the file
 * position before the call and the bytes asked for.
 *
 * Build: cc -shared -fPIC -O2 -o stdio-trace.so stdio-trace.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static FILE *logf;
static const char *want;

static int ours(FILE *f) {
	char link[64], path[PATH_MAX];
	if (!want) want = getenv("STDIO_TRACE_PATH");
	if (!want || !f) return 0;
	snprintf(link, sizeof link, "/proc/self/fd/%d", fileno(f));
	ssize_t n = readlink(link, path, sizeof path - 1);
	if (n <= 0) return 0;
	path[n] = 0;
	return strcmp(path, want) == 0;
}

static void logline(const char *what, long long off, unsigned long long len) {
	if (!logf) {
		const char *p = getenv("STDIO_TRACE_LOG");
		static FILE *(*real_fopen)(const char *, const char *);
		if (!real_fopen) real_fopen = dlsym(RTLD_NEXT, "fopen");
		if (!p || !(logf = real_fopen(p, "a"))) return;
		setvbuf(logf, NULL, _IOLBF, 0);
	}
	fprintf(logf, "%s %lld %llu\n", what, off, len);
}

size_t fread(void *ptr, size_t size, size_t n, FILE *f) {
	static size_t (*real)(void *, size_t, size_t, FILE *);
	static off_t (*tell)(FILE *);
	if (!real) real = dlsym(RTLD_NEXT, "fread");
	if (!tell) tell = dlsym(RTLD_NEXT, "ftello");
	if (ours(f)) logline("read", (long long)tell(f), (unsigned long long)size * n);
	return real(ptr, size, n, f);
}
