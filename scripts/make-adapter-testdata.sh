#!/usr/bin/env bash
# make-adapter-testdata.sh regenerates testdata/adapters/, the inputs of the
# adapters' golden tests (docs/adapters.md):
#
#   sqlite/without-rowid.db.gz  600 rows of 1 KiB, WITHOUT ROWID, keyed by text,
#                               inserted in random key order (Debian sqlite3)
#   sqlite/rowid.db.gz          2000 rows of 1 KiB in random rowid order, with
#                               an index on the text key
#   sqlite/without-rowid-1k.db.gz, -64k.db.gz  the first layout with 1 KiB
#                               and 64 KiB pages
#   sqlite/rowid-insert.db.gz   3000 rows of 1 KiB in a rowid table keyed by an
#                               automatic index, rowids in insertion (random
#                               key) order; -1k.db.gz: 1000 rows in 1 KiB pages,
#                               where every row spills to an overflow page
#   sqlite/*.reads              the preads of range scans over them by the
#                               sqlite3 shell (strace), "OFFSET LENGTH" a line
#   sqlite/*.dbstat             their B-tree structure as SQLite's dbstat
#                               table reports it: path, page, page type
#   sqlite/without-rowid-key.bundle  the first key scan recorded by
#                               predictio record (needs root; timestamps vary);
#                               rowid-insert-key.bundle: the rowid-insert one
#   lmdb/small.mdb.gz           data.mdb of 3000 entries of 1 KiB, random order (mdb_load)
#   lmdb/big.mdb.gz             data.mdb of 300 entries of 9000 bytes (overflow runs)
#   lmdb/*.pages                the pages a cold range scan by lmdb-scan
#                               -nordahead left in the page cache (mincore)
#   gguf/*.gguf                 GGUF headers with tensor infos, no weights
#   gguf/*.llama-reads          the tensor reads of llama.cpp (node-llama-cpp
#                               3.22.1) loading the full model without mmap,
#                               from an LD_PRELOAD fread log
#
# Values are patterned, not random, so the files compress; page layouts
# depend on sizes and order only. Everything is deterministic except the
# .pages files, which another process dropping caches during the scan would
# shrink (the tests then fail: rerun). The llama.cpp recordings are skipped
# with a message when node-llama-cpp is not installed in $LLM_DIR
# (default /var/tmp/llm; see internal/workload/llamacpp).
# Needs: go, sqlite3, strace, lmdb-utils, liblmdb-dev, cc, gzip.
set -euo pipefail
cd "$(dirname "$0")/.."

out=testdata/adapters
tmp=$(mktemp -d /var/tmp/predictio-adapter-testdata.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
w=$tmp/workload
go build -o "$w" ./internal/gen/workload
rm -rf "$out"
mkdir -p "$out/sqlite" "$out/lmdb" "$out/gguf"

# --- SQLite -----------------------------------------------------------------
"$w" sqlite -o "$tmp/without-rowid.db" -layout without-rowid -rows 600 -seed 1 -compressible
"$w" sqlite -o "$tmp/rowid.db" -layout rowid -rows 2000 -seed 2 -compressible
"$w" sqlite -o "$tmp/without-rowid-1k.db" -layout without-rowid -rows 200 -seed 4 -page-size 1024 -compressible
"$w" sqlite -o "$tmp/without-rowid-64k.db" -layout without-rowid -rows 3000 -seed 5 -page-size 65536 -compressible
"$w" sqlite -o "$tmp/rowid-insert.db" -layout rowid-insert -rows 3000 -seed 6 -compressible
"$w" sqlite -o "$tmp/rowid-insert-1k.db" -layout rowid-insert -rows 1000 -seed 8 -page-size 1024 -compressible
# scan NAME DB LAYOUT BY START N: strace one range scan, keep its reads.
scan() {
	local name=$1 db=$2 q
	q=$("$w" sqlite-scan -layout "$3" -by "$4" -start "$5" -n "$6")
	"$w" evict "$db"
	strace -o "$tmp/$name.strace" -e trace=openat,read,pread64,lseek \
		sqlite3 -batch "$db" "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$q" >"$tmp/$name.out"
	{
		echo "# sqlite3 $(sqlite3 --version | cut -d' ' -f1): $q"
		"$w" strace-reads -in "$tmp/$name.strace" -path "$db"
	} >"$out/sqlite/$name.reads"
}
scan without-rowid-key "$tmp/without-rowid.db" without-rowid key 100 200
q="SELECT count(*), sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE ycsb_key <= 'user0000000500' ORDER BY ycsb_key DESC LIMIT 200)"
strace -o "$tmp/desc.strace" -e trace=openat,read,pread64,lseek \
	sqlite3 -batch "$tmp/without-rowid.db" "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$q" >/dev/null
{
	echo "# sqlite3 $(sqlite3 --version | cut -d' ' -f1): $q"
	"$w" strace-reads -in "$tmp/desc.strace" -path "$tmp/without-rowid.db"
} >"$out/sqlite/without-rowid-desc.reads"
scan rowid-rowid "$tmp/rowid.db" rowid rowid 300 600
scan rowid-key "$tmp/rowid.db" rowid key 300 300
scan without-rowid-64k-key "$tmp/without-rowid-64k.db" without-rowid key 500 1000
scan without-rowid-1k-key "$tmp/without-rowid-1k.db" without-rowid key 20 100
scan rowid-insert-key "$tmp/rowid-insert.db" rowid-insert key 300 600
scan rowid-insert-1k-key "$tmp/rowid-insert-1k.db" rowid-insert key 100 300
# queries NAME DB QUERY...: strace the sqlite3 shell running the queries.
queries() {
	local name=$1 db=$2
	shift 2
	"$w" evict "$db"
	strace -o "$tmp/$name.strace" -e trace=openat,read,pread64,lseek \
		sqlite3 -batch "$db" "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$@" >/dev/null
	{
		echo "# sqlite3 $(sqlite3 --version | cut -d' ' -f1): $*"
		"$w" strace-reads -in "$tmp/$name.strace" -path "$db"
	} >"$out/sqlite/$name.reads"
}
queries rowid-insert-desc "$tmp/rowid-insert.db" \
	"SELECT count(*), sum(length(field0)) FROM (SELECT field0 FROM usertable WHERE ycsb_key <= 'user0000002000' ORDER BY ycsb_key DESC LIMIT 600)"
# An index-only scan (a covering index: no lookups) and point lookups.
queries rowid-insert-covering "$tmp/rowid-insert.db" \
	"SELECT count(*) FROM (SELECT ycsb_key FROM usertable WHERE ycsb_key >= 'user0000000300' ORDER BY ycsb_key LIMIT 600)"
points=()
for k in 17 512 1999 233 2900 1024 77 1500 2600 888 5 2222; do
	points+=("$(printf "SELECT length(field0) FROM usertable WHERE ycsb_key = 'user%010d'" "$k")")
done
queries rowid-insert-points "$tmp/rowid-insert.db" "${points[@]}"
# The same key scan recorded by predictio record (root, eBPF): the kernel's
# view of it, with readahead and page-cache inserts.
if [ "$(id -u)" -eq 0 ] && go build -o "$tmp/predictio" ./cmd/predictio; then
	q=$("$w" sqlite-scan -layout without-rowid -by key -start 100 -n 200)
	"$w" evict "$tmp/without-rowid.db"
	"$tmp/predictio" record -o "$out/sqlite/without-rowid-key.bundle" -- \
		sqlite3 -batch "$tmp/without-rowid.db" "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$q" >/dev/null
	q=$("$w" sqlite-scan -layout rowid-insert -by key -start 300 -n 600)
	"$w" evict "$tmp/rowid-insert.db"
	"$tmp/predictio" record -o "$out/sqlite/rowid-insert-key.bundle" -- \
		sqlite3 -batch "$tmp/rowid-insert.db" "PRAGMA mmap_size=0" "PRAGMA cache_size=-2048" "$q" >/dev/null
else
	echo "make-adapter-testdata: not root or no predictio; no recorded bundle" >&2
fi
# The structure SQLite itself reports (dbstat): path, page, type.
for db in without-rowid rowid without-rowid-1k without-rowid-64k; do
	sqlite3 -batch "$tmp/$db.db" "SELECT name, path, pageno, pagetype FROM dbstat WHERE name != 'sqlite_schema' ORDER BY name, path" |
		tr '|' ' ' >"$out/sqlite/$db.dbstat"
done
# With the cell count: in path order the table's leaves hold rowids 1..N
# (rowid-insert assigns them in insertion order), so it gives each rowid's
# leaf.
for db in rowid-insert rowid-insert-1k; do
	sqlite3 -batch "$tmp/$db.db" "SELECT name, path, pageno, pagetype, ncell FROM dbstat WHERE name != 'sqlite_schema' ORDER BY name, path" |
		tr '|' ' ' >"$out/sqlite/$db.dbstat"
done
gzip -9n <"$tmp/without-rowid.db" >"$out/sqlite/without-rowid.db.gz"
gzip -9n <"$tmp/rowid.db" >"$out/sqlite/rowid.db.gz"
gzip -9n <"$tmp/without-rowid-1k.db" >"$out/sqlite/without-rowid-1k.db.gz"
gzip -9n <"$tmp/without-rowid-64k.db" >"$out/sqlite/without-rowid-64k.db.gz"
gzip -9n <"$tmp/rowid-insert.db" >"$out/sqlite/rowid-insert.db.gz"
gzip -9n <"$tmp/rowid-insert-1k.db" >"$out/sqlite/rowid-insert-1k.db.gz"

# --- LMDB -------------------------------------------------------------------
scanner=$("$w" lmdb-scanner -o "$tmp")
# lmdbenv NAME ENTRIES VALUE START N: build, scan cold with MDB_NORDAHEAD
# (no readahead, so what the scan leaves cached is what it touched).
lmdbenv() {
	local name=$1
	"$w" lmdb -o "$tmp/$name" -entries "$2" -value "$3" -seed 3 -compressible
	"$w" evict "$tmp/$name/data.mdb"
	"$scanner" -nordahead "$tmp/$name" "$(printf 'user%010d' "$4")" "$5" >"$tmp/$name.out"
	{
		echo "# lmdb-scan -nordahead ENV $(printf 'user%010d' "$4") $5: $(cat "$tmp/$name.out")"
		"$w" resident -file "$tmp/$name/data.mdb"
	} >"$out/lmdb/$name.pages"
	gzip -9n <"$tmp/$name/data.mdb" >"$out/lmdb/$name.mdb.gz"
}
lmdbenv small 3000 1024 1000 400
lmdbenv big 300 9000 50 100

# --- GGUF -------------------------------------------------------------------
"$w" gguf -o "$out/gguf/small-q8.gguf" -shape small -type q8_0 -header-only >/dev/null
"$w" gguf -o "$out/gguf/small-q4.gguf" -shape small -type q4_0 -header-only >/dev/null
"$w" gguf -o "$out/gguf/llama8b-q8.gguf" -shape 8b -type q8_0 -header-only >/dev/null
llm=${LLM_DIR:-/var/tmp/llm}
if [ -d "$llm/node_modules/node-llama-cpp" ]; then
	cc -shared -fPIC -O2 -o "$tmp/stdio-trace.so" scripts/adapter-testdata/stdio-trace.c -ldl
	avx=none
	grep -qw avx2 /proc/cpuinfo && avx=avx2
	grep -qw avx512f /proc/cpuinfo && avx=avx512
	for t in q8 q4; do
		"$w" gguf -o "$tmp/small-$t.gguf" -shape small -type ${t}_0 >/dev/null
		(cd "$llm" && cp "$OLDPWD/internal/workload/llamacpp/load.mjs" . &&
			STDIO_TRACE_PATH="$tmp/small-$t.gguf" STDIO_TRACE_LOG="$tmp/$t.log" LD_PRELOAD="$tmp/stdio-trace.so" \
				node load.mjs "$tmp/small-$t.gguf" nommap) >"$tmp/$t.out"
		data=$(stat -c %s "$out/gguf/small-$t.gguf")
		{
			echo "# node-llama-cpp 3.22.1, useMmap false, cpu $avx: $(sed -E 's/"model":"[^"]*",//' "$tmp/$t.out")"
			awk -v d="$data" '$1 == "read" && $2 >= d { print $2, $3 }' "$tmp/$t.log"
		} >"$out/gguf/small-$t.llama-reads"
	done
else
	echo "make-adapter-testdata: $llm has no node-llama-cpp; keeping no llama.cpp recordings (install it: internal/workload/llamacpp)" >&2
fi

du -sk "$out"
