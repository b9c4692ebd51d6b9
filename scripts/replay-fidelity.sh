#!/usr/bin/env bash
# replay-fidelity.sh measures how faithfully a baseline replay reproduces
# the program it recorded (issue 11, item 2): for each workload it records
# ROUNDS cold runs (drop_caches 3 before each), replays the first recording
# ROUNDS times at its recorded paths (kernel backend, recorded timing) and
# prints a markdown table row: the recorded wall of that recording, the
# median of all recordings, the baseline replay's median wall, and the
# timing error against both (|replay - recorded| / recorded).
#
#   sudo scripts/replay-fidelity.sh [WORKLOAD...]   # default: all four
#
# Workloads: sqlite (a cold range scan of 16 K rows of a >= 1 GB YCSB-style
# table), python (python3 importing 11 stdlib modules), grep (grep -r over
# the Go source tree, >= 10 K files), threads (fio, 4 threads of buffered
# random reads). Needs root, a built ./predictio (go build ./cmd/predictio),
# sqlite3, /usr/bin/python3, fio and python3 for the JSON. Run it on a quiet
# machine: it is a measurement. Environment: ROUNDS (default 5), WORK
# (default /var/tmp/predictio-fidelity; the sqlite database is built there
# once, about 1.1 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
P=${PREDICTIO:-$PWD/predictio}
ROUNDS=${ROUNDS:-5}
WORK=${WORK:-/var/tmp/predictio-fidelity}
[ -x "$P" ] || { echo "replay-fidelity: build predictio first: go build -o predictio ./cmd/predictio" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "replay-fidelity: needs root (recording uses eBPF, cold runs drop caches)" >&2; exit 1; }
mkdir -p "$WORK"

cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

sqlite_db() {
	local db=$WORK/ycsb.sqlite
	if [ ! -s "$db" ]; then
		echo "replay-fidelity: building $db (1 M rows of 1 KiB values in random key order)" >&2
		sqlite3 "$db" "PRAGMA journal_mode=off; PRAGMA synchronous=off;
			CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);
			WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 1100000)
			INSERT OR IGNORE INTO t SELECT abs(random()) % 1000000000, randomblob(1000) FROM c;"
	fi
	echo "$db"
}

# workload NAME sets INCLUDE (record --include prefixes) and CMD.
workload() {
	case $1 in
	sqlite)
		local db; db=$(sqlite_db)
		INCLUDE=("$db" /usr /lib)
		CMD=(sqlite3 "$db" "PRAGMA mmap_size=0; PRAGMA cache_size=-2048; SELECT sum(length(v)) FROM (SELECT v FROM t WHERE k >= 500000000 ORDER BY k LIMIT 16384);")
		;;
	python)
		INCLUDE=(/usr /lib /etc)
		CMD=(/usr/bin/python3 -c "import json, csv, decimal, email.message, http.client, sqlite3, xml.dom.minidom, argparse, logging, unittest, asyncio")
		;;
	grep)
		local src; src=$(go env GOROOT)/src
		INCLUDE=("$src" /usr /lib)
		CMD=(grep -r -c predictio_needle_that_is_not_there "$src")
		;;
	threads)
		local f=$WORK/fio.dat
		[ -s "$f" ] || fio --name=mk --filename="$f" --rw=write --bs=1M --size=1G --end_fsync=1 >/dev/null
		INCLUDE=("$f")
		CMD=(fio --name=r --filename="$f" --rw=randread --bs=4k --size=1G --number_ios=2000 --numjobs=4 --thread --ioengine=psync --group_reporting --output=/dev/null)
		;;
	*) echo "replay-fidelity: unknown workload $1 (sqlite, python, grep, threads)" >&2; exit 2 ;;
	esac
}

echo "| workload | recorded wall (first) | recorded wall (median of $ROUNDS) | replay wall (median of $ROUNDS) | error vs first | error vs median |"
echo "|---|---|---|---|---|---|"
for w in "${@:-sqlite python grep threads}"; do
	for name in $w; do
		workload "$name"
		walls=()
		for i in $(seq 1 "$ROUNDS"); do
			b=$WORK/$name-$i.bundle
			rm -rf "$b"
			inc=()
			for p in "${INCLUDE[@]}"; do inc+=(--include "$p"); done
			cold
			"$P" record -quiet -o "$b" "${inc[@]}" -- "${CMD[@]}" >/dev/null
			walls+=("$(json "$b/manifest.json" "d['timing']['recorded_wall_ns']")")
		done
		first=${walls[0]}
		med=$(printf '%s\n' "${walls[@]}" | median)
		out=$WORK/$name-replay.json
		"$P" replay --ab baseline --repeat "$ROUNDS" --drop-caches --no-predict --json "$WORK/$name-1.bundle" > "$out"
		rw=$(json "$out" "[p for p in d['summary']['policies'] if p['policy']=='baseline'][0]['wall_ns']['median']")
		python3 - "$name" "$first" "$med" "$rw" <<'EOF'
import sys
name, first, med, rw = sys.argv[1], *map(float, sys.argv[2:])
ms = lambda ns: f"{ns/1e6:.1f} ms"
print(f"| {name} | {ms(first)} | {ms(med)} | {ms(rw)} | {abs(rw-first)/first*100:.1f}% | {abs(rw-med)/med*100:.1f}% |")
EOF
	done
done
