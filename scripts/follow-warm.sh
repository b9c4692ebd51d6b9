#!/usr/bin/env bash
# follow-warm.sh measures what the daemon's following costs a warm program:
# a 16 K-row sqlite3 scan of the YCSB table, cached, 10 runs per mode, the
# modes (no daemon, follow_poll 1 ms, follow_poll 200 µs) alternated for
# ROUNDS rounds. It prints each mode's median, min and max in µs and the
# daemon's CPU (utime+stime ticks, 10 ms each) over its 10 runs.
#
#   sudo ROUNDS=3 scripts/follow-warm.sh
#
# Needs root, a built ./predictio, sqlite3, /var/tmp/adbig/ycsb-wr.db
# (scripts/adapters-ab.sh says how to make it) and daemon configs that
# follow sqlite3: run scripts/adapters-ab.sh with MODES="daemon1 daemon"
# and OUT=$OUT first (their learned profiles are reused).
set -uo pipefail
P=${P:-./predictio}
OUT=${OUT:-/var/tmp/predictio-adapters-ab}
ROUNDS=${ROUNDS:-3}
DB=/var/tmp/adbig/ycsb-wr.db
Q="SELECT sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE ycsb_key >= 'user0000200000' ORDER BY ycsb_key LIMIT 16384);"
for c in daemon1-sqlite daemon-sqlite; do
	[ -f $OUT/$c/d.toml ] || { echo "follow-warm: no $OUT/$c/d.toml: run scripts/adapters-ab.sh with WORKLOADS=sqlite MODES=\"daemon1 daemon\" OUT=$OUT first" >&2; exit 1; }
done
q() { local s=$(date +%s%N); sqlite3 -batch $DB "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$Q" > /dev/null; echo $((($(date +%s%N) - s) / 1000)); }
for _ in 1 2 3; do q > /dev/null; done
for _ in $(seq "$ROUNDS"); do
	for m in none daemon1 daemon; do
		DP=
		if [ $m != none ]; then
			$P daemon --config $OUT/$m-sqlite/d.toml > /dev/null 2>&1 &
			DP=$!
			sleep 1.5
			c0=$(awk '{print $14+$15}' /proc/$DP/stat)
		fi
		ts=()
		for _ in $(seq 10); do ts+=("$(q)"); done
		cpu=0
		if [ -n "$DP" ]; then
			cpu=$(($(awk '{print $14+$15}' /proc/$DP/stat) - c0))
			kill $DP
			wait $DP 2> /dev/null
		fi
		echo "$m $(printf '%s\n' "${ts[@]}" | sort -n | awk '{a[NR]=$1} END {print "median_us", a[int((NR+1)/2)], "min", a[1], "max", a[NR]}') daemon_cpu_ticks $cpu"
	done
done
