#!/usr/bin/env bash
# adapters-ab.sh measures the structure adapters live, on unmodified
# programs, cold (drop_caches before each run; fincore shows what stayed
# resident), modes alternating and rotated each round (issue 13):
#   sqlite     the Debian sqlite3 CLI: a 16 K-row key scan of the 1.9 GB
#              YCSB-style WITHOUT ROWID table (mmap off, 2 MiB cache)
#   sqlite-rowid  the same scan of the 1.6 GB rowid table through its key
#              index (rows looked up in rowid order)
#   lmdb       internal/workload's LMDB scanner: 16 K keys of a 1.8 GB env
#   lmdb-nora  the same with MDB_NORDAHEAD
# Modes: baseline (the program alone); noop (predictio run --backend none
# --policy tree: events, adapters and policy, nothing read); tree (the
# kernel backend); physical; noop1/tree1/tree5 (--latency 1ms/5ms); bare
# (run --backend none, no policy); tree-old (tree with the binary $OLD, for
# an A/B of two commits); daemon (predictio daemon with its defaults: a
# followed program's events every 200 µs; daemon02 the same), daemon1
# (follow_poll 1 ms, the default before 2026-12-07) and daemon20 (20 ms),
# each started after the cache is dropped and
# stopped after the command; before the first round it learned one launch
# of the program over another key range, so it follows the program and its
# profile does not hold the measured range). It prints a markdown table of
# medians.
#
#   sudo scripts/adapters-ab.sh
#   sudo ROUNDS=3 WORKLOADS=sqlite MODES="baseline noop tree" scripts/adapters-ab.sh
#
# Needs root, a built ./predictio, sqlite3, fincore, and the workloads in
# /var/tmp/adbig, made once (minutes; about 4 GB):
#   go run ./internal/gen/workload sqlite -o /var/tmp/adbig/ycsb-wr.db -layout without-rowid
#   go run ./internal/gen/workload sqlite -o /var/tmp/adbig/ycsb-rowid.db -layout rowid
#   go run ./internal/gen/workload lmdb -o /var/tmp/adbig/lmdb-env
#   go run ./internal/gen/workload lmdb-scanner -o /var/tmp/adbig
# ROWS sets the sqlite scans' length (default 16384).
# Run it on a quiet machine: every figure is a wall-clock time.
set -uo pipefail
P=${P:-./predictio}
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-/var/tmp/predictio-adapters-ab}
mkdir -p $OUT
DB=/var/tmp/adbig/ycsb-wr.db
DBR=/var/tmp/adbig/ycsb-rowid.db
Q="SELECT sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE ycsb_key >= 'user0000200000' ORDER BY ycsb_key LIMIT ${ROWS:-16384});"
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; fincore -nb "$@" | awk '{s+=$1} END {print s+0}'; }
t() { local s=$(date +%s%N); "$@" > $OUT/last.out 2>&1; local rc=$?; echo "$(( ($(date +%s%N) - s) / 1000 )) $rc"; }
QL="SELECT sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE ycsb_key >= 'user0000300000' ORDER BY ycsb_key LIMIT 2048);"
dstart() { # daemon-dir follow_poll
	if [ ! -f $OUT/$1/d.toml ]; then
		mkdir -p $OUT/$1
		printf 'profile_dir = "%s"\nsocket = "%s"\nmetrics = ""\nfollow_poll = "%s"\n[learn]\nprograms = ["sqlite3", "lmdb-scan"]\nlaunches = 1\n' \
			$OUT/$1/profiles $OUT/$1/d.sock $2 > $OUT/$1/d.toml
	fi
	$P daemon --config $OUT/$1/d.toml >> $OUT/$1/log 2>&1 &
	DPID=$!
	for _ in $(seq 500); do $P daemon status --socket $OUT/$1/d.sock > /dev/null 2>&1 && return; sleep 0.02; done
	echo "adapters-ab: the daemon of $OUT/$1 did not start: $OUT/$1/log" >&2; exit 1
}
dstop() { kill $DPID; wait $DPID; }
learned() { # daemon-dir follow_poll workload: a cold launch over another range, until followed
	[ -f $OUT/$1/learned-$3 ] && return
	for i in 1 2 3; do
		# (A warm scan can end before the daemon's tracing is attached.)
		[ $i = 1 ] || { dstop; rm -rf $OUT/$1/profiles; }
		dstart $1 $2
		sync; echo 3 > /proc/sys/vm/drop_caches
		case $3 in
		sqlite) sqlite3 -batch $DB "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$QL" > /dev/null ;;
		sqlite-rowid) sqlite3 -batch $DBR "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$QL" > /dev/null ;;
		lmdb*) /var/tmp/adbig/lmdb-scan /var/tmp/adbig/lmdb-env user0000300000 2048 > /dev/null ;;
		esac
		sleep 0.5
		$P daemon status --socket $OUT/$1/d.sock --json | grep -q '"followed": true' && break
	done
	$P daemon status --socket $OUT/$1/d.sock | grep -A20 '^profiles' > $OUT/$1/learned-$3
	dstop
	cat $OUT/$1/learned-$3
}
run1() { # workload mode
	local w=$1 m=$2 files cmd
	case $w in
	sqlite) files=$DB; cmd=(sqlite3 -batch $DB "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$Q") ;;
	sqlite-rowid) files=$DBR; cmd=(sqlite3 -batch $DBR "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$Q") ;;
	lmdb) files=/var/tmp/adbig/lmdb-env/data.mdb; cmd=(/var/tmp/adbig/lmdb-scan /var/tmp/adbig/lmdb-env user0000100000 16384) ;;
	lmdb-nora) files=/var/tmp/adbig/lmdb-env/data.mdb; cmd=(/var/tmp/adbig/lmdb-scan -nordahead /var/tmp/adbig/lmdb-env user0000100000 16384) ;;
	esac
	local pre
	case $m in
	baseline) pre=() ;;
	noop) pre=($P run --no-profile --backend none --policy tree --) ;;
	tree) pre=($P run --no-profile --policy tree --) ;;
	tree-old) pre=(${OLD:?set OLD to the other binary} run --no-profile --policy tree --) ;;
	physical) pre=($P run --no-profile --policy physical --) ;;
	noop1) pre=($P run --no-profile --latency 1ms --backend none --policy tree --) ;;
	tree1) pre=($P run --no-profile --latency 1ms --policy tree --) ;;
	tree5) pre=($P run --no-profile --latency 5ms --policy tree --) ;;
	bare) pre=($P run --no-profile --backend none --) ;;
	daemon|daemon1|daemon20|daemon02) pre=() ;;
	esac
	local poll=200us
	[ $m = daemon1 ] && poll=1ms
	[ $m = daemon20 ] && poll=20ms
	case $m in daemon*) learned $m-$w $poll $w ;; esac
	local resid=$(cold $files)
	case $m in daemon*) dstart $m-$w $poll; resid="$resid+$(fincore -nb $files | awk '{s+=$1} END {print s+0}')" ;; esac
	local r=$(t "${pre[@]}" "${cmd[@]}")
	case $m in daemon*) dstop ;; esac
	echo "$w $m $r resid=$resid $(tail -c 200 $OUT/last.out | tr '\n' ' ')" | tee -a $OUT/raw.txt
}
: > $OUT/raw.txt
for w in ${WORKLOADS:-sqlite lmdb lmdb-nora}; do
	if [ -n "${MODES:-}" ]; then
		read -ra modes <<< "$MODES"
	else
		modes=(baseline noop tree)
		[ $w = sqlite ] && modes+=(physical)
	fi
	for r in $(seq 1 $ROUNDS); do
		n=${#modes[@]}
		for i in $(seq 0 $((n-1))); do run1 $w ${modes[$(( (i + r) % n ))]}; done
	done
done
python3 - $OUT/raw.txt <<'PY' | tee $OUT/summary.md
import sys, statistics as st, collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    f=l.split()
    if f[3]!='0': continue
    d[(f[0],f[1])].append(int(f[2])/1e6)
print("| workload | mode | n | median s | min | max | vs baseline |")
print("|---|---|---|---|---|---|---|")
for (w,m),v in sorted(d.items()):
    b=st.median(d[(w,'baseline')]) if d[(w,'baseline')] else float('nan')
    print(f"| {w} | {m} | {len(v)} | {st.median(v):.3f} | {min(v):.3f} | {max(v):.3f} | {st.median(v)/b:.2f}x |")
PY
