#!/bin/bash
# rawsys-ab.sh: what Go's system call wrappers cost a cold file walk, against
# raw system calls (internal/rawsys, as replay makes its calls) and a C loop:
# each opens, reads to the end in 96 KiB reads and closes every file of a
# list, after drop_caches; the three rotate over ROUNDS rounds. Needs root,
# gcc and go.
#
#   sudo scripts/rawsys-ab.sh [DIR]     # default DIR: the fidelity Go tree
#   ROUNDS=9 FILES=4000
set -euo pipefail
DIR=${1:-/var/tmp/predictio-fidelity/gosrc/src}
ROUNDS=${ROUNDS:-9}
FILES=${FILES:-4000}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
find "$DIR" -type f | awk -v n="$FILES" 'NR <= n' > "$T/files"
cat > "$T/walk.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static char buf[98304];
int main(int argc, char **argv) {
	FILE *l = fopen(argv[1], "r");
	char p[4096];
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	while (fgets(p, sizeof p, l)) {
		p[strcspn(p, "\n")] = 0;
		int fd = open(p, O_RDONLY);
		if (fd < 0)
			continue;
		while (read(fd, buf, sizeof buf) > 0)
			;
		close(fd);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
	return 0;
}
C
gcc -O2 -o "$T/walk" "$T/walk.c"
go test -c -o "$T/rawsys.test" ./internal/rawsys
gobench() { # ms of one cold walk through sub-benchmark $1
	"$T/rawsys.test" -test.run '^$' -test.bench "ColdWalk/$1\$" -test.benchtime 1x -rawsys.files "$T/files" |
		awk '/ns\/op/ { printf "%.1f\n", $3 / 1e6 }'
}
modes=(c wrappers raw)
for r in $(seq 0 $((ROUNDS - 1))); do
	for k in 0 1 2; do
		m=${modes[$(((r + k) % 3))]}
		if [ "$m" = c ]; then
			sync; echo 3 > /proc/sys/vm/drop_caches
			echo "c $("$T/walk" "$T/files")"
		else
			echo "$m $(gobench "$m")"
		fi
	done
done | sort | awk '{ v[$1] = v[$1] " " $2 } END { for (m in v) print m ":" v[m] }' |
	python3 -c '
import sys, statistics
for line in sys.stdin:
    m, vals = line.split(":")
    xs = sorted(float(x) for x in vals.split())
    print(f"{m:9s} median {statistics.median(xs):.1f} ms [{xs[0]:.1f}-{xs[-1]:.1f}] over {len(xs)} rounds")'
