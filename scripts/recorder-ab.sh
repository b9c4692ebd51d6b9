#!/usr/bin/env bash
# recorder-ab.sh measures what recording costs a real program (issues 11
# and 14): it runs the program cold (drop_caches before each run) untraced
# and under `BIN record` for each binary given, alternating the order
# round by round, and prints one markdown row per configuration: the
# program's wall and system time (its own /usr/bin/time), the recorded
# wall of the bundle, and the recorder's CPU (user and system of
# `predictio record` less the program's own), as medians [min-max].
#
#   sudo scripts/recorder-ab.sh [-r ROUNDS] [-w WORKLOAD] plain BIN [BIN...]
#
# "plain" is the program untraced. The workloads (grep, sqlite, python,
# threads) are scripts/workloads.sh's, with their data under WORK (default
# /var/tmp/predictio-fidelity, shared with scripts/replay-fidelity.sh).
#
# Extra arguments for `record` can follow a binary after a colon:
# ./predictio:--ring-size=1M. Needs root, /usr/bin/time and python3.
set -euo pipefail
rounds=8
workload=grep
while getopts "r:w:" o; do
	case $o in
	r) rounds=$OPTARG ;;
	w) workload=$OPTARG ;;
	*) echo "usage: $0 [-r ROUNDS] [-w WORKLOAD] plain BIN [BIN...]" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-r ROUNDS] [-w WORKLOAD] plain BIN [BIN...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "recorder-ab: needs root (eBPF, drop_caches)" >&2; exit 1; }
WORK=${WORK:-/var/tmp/predictio-fidelity}
. "$(dirname "$0")/workloads.sh"
workload "$workload"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
for i in $(seq 1 "$rounds"); do
	cfgs=("$@")
	if [ $((i % 2)) = 0 ]; then mapfile -t cfgs < <(printf '%s\n' "$@" | tac); fi
	for c in "${cfgs[@]}"; do
		cold
		if [ "$c" = plain ]; then
			/usr/bin/time -o "$tmp/prog" -f "%e %S %U" "${CMD[@]}" >/dev/null || true
			echo "$c $(tail -1 "$tmp/prog") 0 0 0"
			continue
		fi
		bin=${c%%:*}
		extra=()
		[ "$bin" != "$c" ] && extra=("${c#*:}")
		inc=()
		for p in "${INCLUDE[@]}"; do inc+=(--include "$p"); done
		rm -rf "$tmp/b"
		/usr/bin/time -o "$tmp/rec" -f "%U %S" "$bin" record -quiet -o "$tmp/b" "${extra[@]}" "${inc[@]}" \
			-- /usr/bin/time -o "$tmp/prog" -f "%e %S %U" "${CMD[@]}" >/dev/null || true
		wall=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['timing']['recorded_wall_ns'])" "$tmp/b/manifest.json")
		echo "$c $(tail -1 "$tmp/prog") $wall $(tail -1 "$tmp/rec")"
	done
done > "$tmp/out"
python3 - "$tmp/out" "$rounds" <<'PY'
import statistics as st, sys
rows = {}
order = []
for line in open(sys.argv[1]):
    c, wall, sys_, user, rwall, ru, rs = line.split()
    if c not in rows:
        rows[c] = []
        order.append(c)
    rec = float(ru) + float(rs) - float(sys_) - float(user) if c != "plain" else None
    rows[c].append((float(wall), float(sys_), float(rwall) / 1e6, rec))
def m(v, fmt):
    return (fmt % st.median(v)) + (" [" + fmt % min(v) + "-" + fmt % max(v) + "]")
print(f"| configuration ({sys.argv[2]} rounds) | the program's wall (s) | its system time (s) | recorded wall (ms) | the recorder's CPU (s) |")
print("|---|---|---|---|---|")
base = st.median(x[0] for x in rows["plain"]) if "plain" in rows else None
for c in order:
    v = rows[c]
    w = m([x[0] for x in v], "%.3f")
    if base and c != "plain":
        w += " (%+.0f%%)" % (100 * (st.median(x[0] for x in v) / base - 1))
    rec = "" if c == "plain" else m([x[3] for x in v], "%.2f")
    rw = "" if c == "plain" else "%.0f" % st.median(x[2] for x in v)
    print(f"| {c} | {w} | {st.median(x[1] for x in v):.2f} | {rw} | {rec} |")
PY
