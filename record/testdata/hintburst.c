/* hintburst.c: the C sender of record's stopped-recorder test, with the
 * protocol of tracetest's hintburst helper: it opens the hint socket
 * $PREDICTIO_RECORD_SOCK lazily, prints "ready", and answers each line of
 * stdin ("send N": N tree_child_enter hints naming $PREDICTIO_RECORD_FILE;
 * "flush": pio_hints_flush until it succeeds, 10 s at most) with
 * "ns=... sent=... full=... none=... reported=...". */
#include "predictio_hints.h"
#include <stdio.h>

int main(void)
{
	const char *file = getenv("PREDICTIO_RECORD_FILE");
	struct pio_hints *h = pio_hints_open(getenv("PREDICTIO_RECORD_SOCK"));
	if (!h || !file) {
		perror("hintburst");
		return 1;
	}
	uint64_t kids[] = {10, 11, 12, 13};
	char line[64];
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		int64_t start = pio__now();
		if (!strncmp(line, "send ", 5)) {
			long n = atol(line + 5);
			for (long i = 0; i < n; i++)
				if (pio_tree_child_enter(h, file, -1, (uint64_t)i, 1, kids, 4)) {
					perror("send");
					return 1;
				}
		} else if (!strncmp(line, "flush", 5)) {
			struct timespec ms = {0, 1000000};
			while (pio_hints_flush(h) && pio__now() - start < 10000000000LL)
				nanosleep(&ms, NULL);
		}
		struct pio_hints_stats s;
		pio_hints_get_stats(h, &s);
		printf("ns=%lld sent=%llu full=%llu none=%llu reported=%llu\n", (long long)(pio__now() - start),
		       (unsigned long long)s.sent, (unsigned long long)s.queue_full, (unsigned long long)s.no_server,
		       (unsigned long long)s.reported);
		fflush(stdout);
	}
	return pio_hints_close(h);
}
