#!/usr/bin/env bash
# libcachesim-ab.sh compares the LRU lane of predictio simulate with
# libCacheSim's LRU, side by side, on the same request sequences (issue 14;
# docs/BENCHMARKS.md "Simulate against its targets"): EVENTS single-page
# requests of one file of 1 Mi pages, uniform (trace synth --pattern random)
# and Zipf 0.9 (--pattern zipf), through an LRU of 64 Ki pages (256 MiB of
# 4 KiB pages). libCacheSim runs through its library (scripts/libcachesim/
# lru.c: LRU_init with the hash table sized to the cache, not its cachesim
# CLI, whose table is fixed at 2^24 buckets), fed each bundle's first_page
# column as a file of little-endian uint64s. Each round runs, per trace,
# both tools (the first one alternating between rounds):
#   predictio  /usr/bin/time -f %e predictio simulate --json --no-readahead
#              --no-oracle --cache 256MiB --device nvme BUNDLE: whole-process
#              req/s (EVENTS / elapsed), and its own events_per_sec
#   libCacheSim  the driver: req/s of its request loop and of its whole
#              process (from the process's start: exec, mmap, set-up)
# and prints a table per trace, median [min–max] over the rounds, with the
# ratios and the miss counts; it exits 1 if the two tools' miss counts
# differ in any round.
#
#   scripts/libcachesim-ab.sh
#   EVENTS=1000000 ROUNDS=1 PREDICTIO=/tmp/predictio scripts/libcachesim-ab.sh
#
# Environment:
#   PREDICTIO  the predictio binary (default: predictio on PATH)
#   EVENTS     requests per trace (default 10000000)
#   ROUNDS     rounds (default 5)
#   WORK       bundles, traces, the driver and the runs' output, reused
#              (default /var/tmp/predictio-lcs)
#   LCS_SRC    libCacheSim's source: a source tree, or a git repository
#              (bare or not) to check out LCS_COMMIT from (default
#              /work/.mirror/1a1a11a+libCacheSim/repo)
#   LCS_COMMIT the commit to check out of a repository (default aa0fc40)
#   LCS_BUILD  libCacheSim's build directory (default
#              /var/tmp/libcachesim-build); built in Release mode unless it
#              holds liblibCacheSim.a already
#   JOBS       make -j (default 2)
#
# Needs cmake, cc, make, pkg-config, python3, GNU time (/usr/bin/time) and
# libCacheSim's dependencies: apt-get install -y cmake libglib2.0-dev
# libzstd-dev pkg-config. Run it on a quiet machine: every figure is a
# wall-clock rate.
set -euo pipefail
PREDICTIO=${PREDICTIO:-predictio}
EVENTS=${EVENTS:-10000000}
ROUNDS=${ROUNDS:-5}
WORK=${WORK:-/var/tmp/predictio-lcs}
LCS_SRC=${LCS_SRC:-/work/.mirror/1a1a11a+libCacheSim/repo}
LCS_COMMIT=${LCS_COMMIT:-aa0fc40}
LCS_BUILD=${LCS_BUILD:-/var/tmp/libcachesim-build}
JOBS=${JOBS:-2}
CACHE=256MiB
CACHE_PAGES=65536 # CACHE in 4 KiB pages: the driver's cache size
FILE_PAGES=1048576
HERE=$(cd "$(dirname "$0")" && pwd)

die() { echo "libcachesim-ab: $*" >&2; exit 1; }
case $EVENTS in '' | *[!0-9]* | 0) die "EVENTS=$EVENTS: want a positive number of requests" ;; esac
case $ROUNDS in '' | *[!0-9]* | 0) die "ROUNDS=$ROUNDS: want a positive number of rounds" ;; esac
for t in cmake cc make pkg-config python3 /usr/bin/time; do
	command -v "$t" > /dev/null || die "$t not found (apt-get install -y cmake libglib2.0-dev libzstd-dev pkg-config)"
done
command -v "$PREDICTIO" > /dev/null || die "PREDICTIO=$PREDICTIO not found; build it (go build -o /tmp/predictio ./cmd/predictio) and set PREDICTIO"
mkdir -p "$WORK"

# libCacheSim: the library, in Release mode, unless built already.
lcs_src_dir=""
if [ -f "$LCS_BUILD/liblibCacheSim.a" ] && [ -f "$LCS_BUILD/CMakeCache.txt" ]; then
	lcs_src_dir=$(sed -n 's/^libCacheSim_SOURCE_DIR:STATIC=//p' "$LCS_BUILD/CMakeCache.txt")
	[ -f "$lcs_src_dir/libCacheSim/include/libCacheSim.h" ] || lcs_src_dir=""
fi
if [ -z "$lcs_src_dir" ]; then
	if [ -f "$LCS_SRC/CMakeLists.txt" ] && [ -d "$LCS_SRC/libCacheSim" ]; then
		lcs_src_dir=$LCS_SRC
	elif git -C "$LCS_SRC" rev-parse --git-dir > /dev/null 2>&1; then
		lcs_src_dir=$WORK/libcachesim-src
		if [ ! -f "$lcs_src_dir/CMakeLists.txt" ]; then
			echo "libcachesim-ab: checking out libCacheSim $LCS_COMMIT from $LCS_SRC into $lcs_src_dir" >&2
			rm -rf "$lcs_src_dir.tmp"
			# data/ holds large sample traces (a mirror may lack their
			# blobs, and git then complains of invalid objects even with
			# data/ left out: the log keeps that); the library does not
			# need them.
			{ git clone -q --no-checkout "$LCS_SRC" "$lcs_src_dir.tmp" &&
				git -C "$lcs_src_dir.tmp" sparse-checkout set --no-cone '/*' '!/data/' &&
				git -C "$lcs_src_dir.tmp" -c advice.detachedHead=false checkout -q --detach "$LCS_COMMIT"; } 2> "$WORK/checkout.log" ||
				{ cat "$WORK/checkout.log" >&2; die "checking out $LCS_COMMIT of $LCS_SRC failed"; }
			[ -f "$lcs_src_dir.tmp/libCacheSim/include/libCacheSim.h" ] || die "$lcs_src_dir.tmp: no libCacheSim/include/libCacheSim.h after the checkout"
			mv "$lcs_src_dir.tmp" "$lcs_src_dir"
		fi
	else
		die "no libCacheSim source at LCS_SRC=$LCS_SRC: set LCS_SRC to a source tree or repository, e.g.
  git clone https://github.com/1a1a11a/libCacheSim /var/tmp/libcachesim-src && git -C /var/tmp/libcachesim-src checkout $LCS_COMMIT
  LCS_SRC=/var/tmp/libcachesim-src $0"
	fi
	echo "libcachesim-ab: building libCacheSim (Release) in $LCS_BUILD" >&2
	mkdir -p "$LCS_BUILD"
	cmake -S "$lcs_src_dir" -B "$LCS_BUILD" -DCMAKE_BUILD_TYPE=Release -DENABLE_TESTS=OFF > "$LCS_BUILD/cmake.log" 2>&1 ||
		die "cmake failed: $LCS_BUILD/cmake.log"
	make -C "$LCS_BUILD" -j"$JOBS" libCacheSim > "$LCS_BUILD/make.log" 2>&1 || die "make failed: $LCS_BUILD/make.log"
fi
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$LCS_BUILD/CMakeCache.txt" ||
	die "$LCS_BUILD is not a Release build; remove it or set LCS_BUILD"

# The driver, rebuilt when its source or the library is newer.
LRU=$WORK/lru
if [ ! -x "$LRU" ] || [ "$HERE/libcachesim/lru.c" -nt "$LRU" ] || [ "$LCS_BUILD/liblibCacheSim.a" -nt "$LRU" ]; then
	# shellcheck disable=SC2046 # pkg-config's flags are words
	cc -O2 -I"$lcs_src_dir/libCacheSim/include" $(pkg-config --cflags glib-2.0) -o "$LRU.tmp" "$HERE/libcachesim/lru.c" \
		"$LCS_BUILD/liblibCacheSim.a" $(pkg-config --libs glib-2.0) -lzstd -lm -lpthread -ldl -lstdc++ 2> "$WORK/lru.cc.log" ||
		{ cat "$WORK/lru.cc.log" >&2; die "building the driver failed"; }
	mv "$LRU.tmp" "$LRU"
fi

# The bundles and their page columns, made once per EVENTS.
# to_u64 BUNDLE OUT: the first_page column of BUNDLE's accesses as
# little-endian uint64s; every row must be a 1-page read of one file.
to_u64() {
	"$PREDICTIO" trace cat --format csv "$1" | python3 -c '
import array, csv, sys
rows = csv.reader(sys.stdin)
head = next(rows)
try:
    page, npages, fid, kind = (head.index(c) for c in ("first_page", "npages", "file_id", "kind"))
except ValueError as e:
    sys.exit("libcachesim-ab: accesses header %s: %s" % (head, e))
out, buf, n, files = open(sys.argv[1], "wb"), array.array("Q"), 0, set()
for r in rows:
    if r[npages] != "1" or r[kind] != "read":
        sys.exit("libcachesim-ab: row %d is not a 1-page read: %s" % (n + 1, r))
    files.add(r[fid])
    buf.append(int(r[page]))
    n += 1
    if len(buf) == 1 << 20:
        if sys.byteorder == "big": buf.byteswap()
        buf.tofile(out); buf = array.array("Q")
if sys.byteorder == "big": buf.byteswap()
buf.tofile(out)
if len(files) > 1:
    sys.exit("libcachesim-ab: %d files; the driver keys on pages alone" % len(files))
print(n)
' "$2"
}
TRACES="uniform zipf"
for t in $TRACES; do
	b=$WORK/$t-$EVENTS.bundle
	if [ ! -f "$b/manifest.json" ]; then
		rm -rf "$b" "$b.tmp"
		case $t in
		uniform) args=(--pattern random) ;;
		zipf) args=(--pattern zipf --zipf-s 0.9) ;;
		esac
		"$PREDICTIO" trace synth -o "$b.tmp" "${args[@]}" --events "$EVENTS" --file-pages $FILE_PAGES --seed 1 > /dev/null
		mv "$b.tmp" "$b"
		rm -f "$WORK/$t-$EVENTS.u64"
	fi
	if [ ! -f "$WORK/$t-$EVENTS.u64" ]; then
		n=$(to_u64 "$b" "$WORK/$t-$EVENTS.u64.tmp")
		[ "$n" = "$EVENTS" ] || die "$b: $n requests, want $EVENTS"
		mv "$WORK/$t-$EVENTS.u64.tmp" "$WORK/$t-$EVENTS.u64"
	fi
done

# The rounds.
OUT=$WORK/runs-$EVENTS
rm -rf "$OUT"
mkdir -p "$OUT"
run_predictio() { # trace round
	local b=$WORK/$1-$EVENTS.bundle o=$OUT/$1-$2.predictio
	/usr/bin/time -f '%e' -o "$o.time" "$PREDICTIO" simulate --json --no-readahead --no-oracle --cache $CACHE --device nvme "$b" \
		> "$o.json" 2> "$o.err" || { cat "$o.err" >&2; die "predictio simulate $b failed"; }
}
run_lcs() { # trace round
	local o=$OUT/$1-$2.lcs
	"$LRU" "$WORK/$1-$EVENTS.u64" $CACHE_PAGES > "$o.json" 2> "$o.err" || { cat "$o.err" >&2; die "$LRU failed"; }
}
for r in $(seq "$ROUNDS"); do
	for t in $TRACES; do
		if [ $((r % 2)) = 1 ]; then
			run_predictio "$t" "$r"
			run_lcs "$t" "$r"
		else
			run_lcs "$t" "$r"
			run_predictio "$t" "$r"
		fi
	done
	echo "libcachesim-ab: round $r of $ROUNDS done" >&2
done

# The tables.
python3 - "$OUT" "$EVENTS" "$ROUNDS" "$CACHE_PAGES" $TRACES << 'EOF'
import json, statistics, sys
out, events, rounds, cache_pages, traces = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]

def rate(v):
    return "%.2f M" % (v / 1e6)

def ratio(v):
    return "%.3f" % v

def cell(vs, fmt=rate):
    return "%s [%s–%s]" % (fmt(statistics.median(vs)), fmt(min(vs)), fmt(max(vs)))

bad = False
for t in traces:
    m = {k: [] for k in ("p_whole", "p_eps", "l_loop", "l_whole", "r_whole", "r_loop")}
    misses = []
    for r in range(1, rounds + 1):
        base = "%s/%s-%d" % (out, t, r)
        rep = json.load(open(base + ".predictio.json"))
        secs = float(open(base + ".predictio.time").read().split()[-1])
        lane = next(p for p in rep["policies"] if p["name"] == "baseline")
        if rep["events"] != events or lane["demand"] != events:
            sys.exit("libcachesim-ab: %s round %d: predictio saw %d events, %d pages demanded, want %d" % (t, r, rep["events"], lane["demand"], events))
        if rep["cache_bytes"] // rep["page_size"] != cache_pages or rep["readahead"]:
            sys.exit("libcachesim-ab: %s round %d: predictio's cache is %d pages (readahead %s), the driver's %d" % (t, r, rep["cache_bytes"] // rep["page_size"], rep["readahead"], cache_pages))
        lcs = json.loads(open(base + ".lcs.json").read())
        if lcs["requests"] != events:
            sys.exit("libcachesim-ab: %s round %d: libCacheSim saw %d requests, want %d" % (t, r, lcs["requests"], events))
        p_whole = events / secs if secs > 0 else float("inf")
        m["p_whole"].append(p_whole)
        m["p_eps"].append(rep["events_per_sec"])
        m["l_loop"].append(lcs["req_per_s"])
        m["l_whole"].append(lcs["whole_req_per_s"])
        m["r_whole"].append(p_whole / lcs["whole_req_per_s"])
        m["r_loop"].append(rep["events_per_sec"] / lcs["req_per_s"])
        misses.append((lane["misses"], lcs["misses"]))
    same = all(a == b for a, b in misses)
    bad |= not same
    print("\n%s: %d requests over %d pages, LRU of %d pages, %d round(s); median [min–max], req/s\n" % (t, events, 1 << 20, cache_pages, rounds))
    print("| what | figure |")
    print("|---|---|")
    print("| predictio simulate, whole process (/usr/bin/time) | %s |" % cell(m["p_whole"]))
    print("| predictio simulate, its events_per_sec | %s |" % cell(m["p_eps"]))
    print("| libCacheSim LRU, request loop | %s |" % cell(m["l_loop"]))
    print("| libCacheSim LRU, whole process | %s |" % cell(m["l_whole"]))
    print("| ratio predictio / libCacheSim, whole process | %s |" % cell(m["r_whole"], ratio))
    print("| ratio predictio events_per_sec / libCacheSim loop | %s |" % cell(m["r_loop"], ratio))
    ps = sorted(set(a for a, _ in misses))
    ls = sorted(set(b for _, b in misses))
    print("| misses predictio / libCacheSim | %s / %s: %s |" % (",".join(map(str, ps)), ",".join(map(str, ls)), "equal" if same else "DIFFER"))
print("\nruns: %s" % out)
sys.exit(1 if bad else 0)
EOF
