# workloads.sh: the real programs the fidelity and recorder-cost scripts
# run (scripts/replay-fidelity.sh, recorder-ab.sh, bpf-cost.sh), defined
# once. Source it with WORK set (their scratch directory); `workload NAME`
# sets INCLUDE (the record --include prefixes) and CMD, making the
# program's data under WORK on first use:
#
#   sqlite  the Debian sqlite3 CLI: a cold range scan of 16 K rows of a
#           YCSB-style table (SQLITE_DB, default /var/tmp/adbig/ycsb-wr.db
#           if it exists, else WORK/ycsb.sqlite, built once, 1.1 GB)
#   python  python3 importing 11 stdlib modules
#   grep    grep -r over a private copy of the Go source tree (WORK/gosrc)
#   threads fio, 4 threads of buffered 4 KiB random reads (WORK/fio.dat)

# sqlite_db sets DB, the database to scan, and Q, the query.
sqlite_db() {
	DB=${SQLITE_DB:-}
	if [ -z "$DB" ] && [ -s /var/tmp/adbig/ycsb-wr.db ]; then
		DB=/var/tmp/adbig/ycsb-wr.db
	fi
	if [ -n "$DB" ]; then
		Q="SELECT sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE ycsb_key >= 'user0000200000' ORDER BY ycsb_key LIMIT 16384);"
		return
	fi
	DB=$WORK/ycsb.sqlite
	if [ ! -s "$DB" ]; then
		echo "workloads: building $DB (1 M rows of 1 KiB values in random key order)" >&2
		sqlite3 "$DB" "PRAGMA journal_mode=off; PRAGMA synchronous=off;
			CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);
			WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 1100000)
			INSERT OR IGNORE INTO t SELECT abs(random()) % 1000000000, randomblob(1000) FROM c;"
	fi
	Q="SELECT sum(length(v)) FROM (SELECT v FROM t WHERE k >= 500000000 ORDER BY k LIMIT 16384);"
}

# gotree prints a private copy of the Go source tree, made once.
gotree() {
	local dst=$WORK/gosrc
	if [ ! -d "$dst/src" ]; then
		echo "workloads: copying $(go env GOROOT)/src to $dst/src" >&2
		mkdir -p "$dst.tmp"
		cp -a "$(go env GOROOT)/src" "$dst.tmp/src"
		sync
		mv "$dst.tmp" "$dst"
	fi
	echo "$dst/src"
}

# workload NAME sets INCLUDE (record --include prefixes) and CMD.
workload() {
	case $1 in
	sqlite)
		sqlite_db
		INCLUDE=("$DB" /usr /lib)
		CMD=(sqlite3 "$DB" "PRAGMA mmap_size=0; PRAGMA cache_size=-2048; $Q")
		;;
	python)
		INCLUDE=(/usr /lib /etc)
		CMD=(/usr/bin/python3 -c "import json, csv, decimal, email.message, http.client, sqlite3, xml.dom.minidom, argparse, logging, unittest, asyncio")
		;;
	grep)
		local src; src=$(gotree)
		INCLUDE=("$src" /usr /lib)
		CMD=(grep -r -c predictio_needle_that_is_not_there "$src")
		;;
	threads)
		local f=$WORK/fio.dat
		[ -s "$f" ] || fio --name=mk --filename="$f" --rw=write --bs=1M --size=1G --end_fsync=1 >/dev/null
		INCLUDE=("$f")
		CMD=(fio --name=r --filename="$f" --rw=randread --bs=4k --size=1G --number_ios=2000 --numjobs=4 --thread --ioengine=psync --group_reporting --output=/dev/null)
		;;
	*) echo "unknown workload $1 (sqlite, python, grep, threads)" >&2; exit 2 ;;
	esac
}

