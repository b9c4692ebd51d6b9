#!/usr/bin/env bash
# replay-fidelity.sh measures how faithfully replay and simulate reproduce
# the programs they recorded (issue 11, items 2 and 9). For each workload it
# records ROUNDS cold runs (drop_caches 3 before each), replays the first
# recording ROUNDS times at its recorded paths right after recording it
# (kernel backend, recorded timing, A/B of the baseline and POLICY;
# counts by effect in one more run of POLICY, outside the timing: replay
# --effect separate) with the predicted column, and prints two markdown
# tables:
#
#   timing: the recorded wall of that recording and the median (and
#     spread) of all of them, the median of ROUNDS untraced cold runs of
#     the program itself (fork to exit; alternating with the recordings),
#     the baseline replay's median wall, and the timing error against each
#     (|replay - reference| / reference);
#   prediction: per run spec, the measured median replay wall, simulate's
#     predicted wall, and the prediction error (|predicted - measured| /
#     measured); and the kernel backend's time on requests, measured
#     (backend_busy_ns) and modelled (predicted_backend_busy_ns).
#
# and, per workload, replay's recorded-against-replayed comparison per kind
# of operation (service and think time; summary.fidelity). With PAIRED > 0
# it also replays every recording PAIRED times (baseline only), right after
# recording it, and prints
# the paired errors (|median replay of recording i - recorded wall i| /
# recorded wall i) and the median of those replays against the median of
# the recordings: the recordings of one program spread by several percent
# (python3: 165-222 ms), so replaying the first alone measures that
# recording's luck as much as replay.
#
#   sudo scripts/replay-fidelity.sh [WORKLOAD...]   # default: all four
#
# Workloads:
#   sqlite  the Debian sqlite3 CLI: a cold range scan of 16 K rows of a
#           >= 1 GB YCSB-style table (1 KiB values in random key order),
#           PRAGMA mmap_size=0 and cache_size=-2048
#   python  python3 importing 11 stdlib modules
#   grep    grep -r over a private copy of the Go source tree (11.5 K files;
#           a copy, so that other processes' go builds do not warm it)
#   threads fio, 4 threads of buffered 4 KiB random reads (psync)
#
# Needs root, a built ./predictio (go build -o predictio ./cmd/predictio),
# sqlite3, /usr/bin/python3, fio, go (for GOROOT) and python3 for the JSON.
# Run it on a quiet machine: it is a measurement.
#
# Environment:
#   ROUNDS    recordings and replay rounds (default 5)
#   WORK      scratch directory (default /var/tmp/predictio-fidelity)
#   POLICY    the policy of the prediction check (default oracle)
#   PROFILE   a device profile (predictio bench device -o FILE); default: the
#             cached profile of the device holding the files (measure it
#             first: predictio bench device --duration 30s)
#   PROFILE_EACH  a duration (e.g. 20s): measure a device profile (bench
#             device --duration PROFILE_EACH) right before each workload's
#             prediction check and predict with it, instead of PROFILE:
#             this disk's latency drifts by 10-20% within minutes
#   PAIRED    replays of each recording for the paired table (default 3;
#             0 leaves it out)
#   RESIDUE   --max-residue (default 0.3: the libraries every process maps
#             stay cached, as they did when the program was recorded)
#   UNTRACED  1: also replay each recording PAIRED times with --untraced
#             (the recorder's cost, measured per row, taken out of the
#             think times), alternating with the plain replays, simulate
#             it with and without --untraced (the baseline's predicted
#             wall, with the device profile), and print all four against
#             the program untraced
#   SQLITE_DB a database to scan (default: /var/tmp/adbig/ycsb-wr.db if it
#             exists, internal/workload/sqlitedb's WITHOUT ROWID layout,
#             else one built under WORK, 1.1 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
P=${PREDICTIO:-$PWD/predictio}
ROUNDS=${ROUNDS:-5}
WORK=${WORK:-/var/tmp/predictio-fidelity}
POLICY=${POLICY:-oracle}
RESIDUE=${RESIDUE:-0.3}
PAIRED=${PAIRED:-3}
UNTRACED=${UNTRACED:-}
[ -x "$P" ] || { echo "replay-fidelity: build predictio first: go build -o predictio ./cmd/predictio" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "replay-fidelity: needs root (recording uses eBPF, cold runs drop caches)" >&2; exit 1; }
mkdir -p "$WORK"
pred=()
[ -n "${PROFILE:-}" ] && pred=(--device-profile "$PROFILE")

cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# plain_run runs the program cold and untraced and prints its wall time
# (fork to exit) in ns.
plain_run() {
	cold
	local t0 t1
	t0=$(date +%s%N)
	"${CMD[@]}" >/dev/null 2>&1 || true
	t1=$(date +%s%N)
	echo $((t1 - t0))
}
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# paired_replay OUT BUNDLE [FLAGS...] replays BUNDLE's baseline PAIRED
# times cold into the JSON report OUT and prints its median wall (ns).
paired_replay() {
	local out=$1 b=$2
	shift 2
	"$P" replay --ab baseline --repeat "$PAIRED" --drop-caches --max-residue "$RESIDUE" "$@" --json "$b" > "$out"
	json "$out" "[p for p in d['summary']['policies'] if p['policy']=='baseline'][0]['wall_ns']['median']"
}
# untraced_replay BUNDLE TAG: paired_replay with --untraced, adding the
# median wall to uw and the cost taken out to ucost.
untraced_replay() {
	uw+=("$(paired_replay "$WORK/$2-untraced.json" "$1" --untraced)")
	ucost+=("$(json "$WORK/$2-untraced.json" "d['summary']['untraced_ns']")")
	sw+=("$(simulated "$WORK/$2-sim.json" "$1")")
	usw+=("$(simulated "$WORK/$2-sim-untraced.json" "$1" --untraced)")
}
# simulated OUT BUNDLE [FLAGS...]: simulate's baseline wall (ns) of BUNDLE,
# its prediction of the program's wall, with the device profile.
simulated() {
	local out=$1 b=$2
	shift 2
	"$P" simulate --json --no-oracle "${pred[@]}" "$@" "$b" > "$out"
	json "$out" "[p for p in d['policies'] if p['name']=='baseline'][0]['wall_ns']"
}

# sqlite_db, gotree and workload NAME (INCLUDE, CMD): scripts/workloads.sh.
. scripts/workloads.sh

timing=("| workload | recorded wall (first) | recorded wall (median of $ROUNDS, min–max) | the program untraced (median of $ROUNDS, min–max) | replay wall (median of $ROUNDS, min–max) | error vs first | error vs recorded median | error vs the program |" "|---|---|---|---|---|---|---|---|")
paired=("| workload | recorded walls (ms) | replay walls, median of $PAIRED each (ms) | paired error, median (min-max) | median of replays vs median of recordings |" "|---|---|---|---|---|")
prediction=("| workload | run | measured replay wall (median) | predicted wall | prediction error | measured speedup | predicted speedup | backend busy, measured (median) | predicted |" "|---|---|---|---|---|---|---|---|---|")
kinds=()
untraced=("| workload | the program untraced (median) | recorded wall (median) | replay (median of medians) | error vs the program | replay --untraced (median of medians) | error vs the program | the recorder's cost taken out (median) | simulate (median) | error vs the program | simulate --untraced (median) | error vs the program |" "|---|---|---|---|---|---|---|---|---|---|---|---|")
calibrated=""
for name in ${@:-sqlite python grep threads}; do
	workload "$name"
	walls=()
	plain=()
	pw=()
	uw=()
	ucost=()
	sw=()
	usw=()
	# One untraced cold run first, not counted: on a virtual machine the
	# host caches the disk image, and a 4 KiB read of a block it has not
	# read lately takes about 300 us against 45 (docs/BENCHMARKS.md).
	# drop_caches cannot reach the host's cache, so the first timed run
	# should find it as warm as the later ones.
	plain_run >/dev/null
	for i in $(seq 1 "$ROUNDS"); do
		b=$WORK/$name-$i.bundle
		rm -rf "$b"
		inc=()
		for p in "${INCLUDE[@]}"; do inc+=(--include "$p"); done
		# A recording and an untraced cold run of the program, in an order
		# that alternates by round: replay must reproduce the program, and
		# the recording itself costs the program its tracing.
		if [ $((i % 2)) = 0 ]; then plain+=("$(plain_run)"); fi
		cold
		# The program's exit status is its own (grep -c exits 1 when nothing matches).
		"$P" record -quiet -o "$b" "${inc[@]}" -- "${CMD[@]}" >/dev/null || true
		walls+=("$(json "$b/manifest.json" "d['timing']['recorded_wall_ns']")")
		if [ $((i % 2)) = 1 ]; then plain+=("$(plain_run)"); fi
		if [ "$i" = 1 ]; then
			# The prediction check of the first recording, right after
			# it: the prediction replays its recorded think and service
			# times, which a replay minutes later on a drifted machine
			# would not meet.
			if [ -n "${PROFILE_EACH:-}" ]; then
				"$P" bench device --duration "$PROFILE_EACH" -o "$WORK/$name-profile.json" 2>/dev/null
				pred=(--device-profile "$WORK/$name-profile.json")
			fi
			"$P" replay --ab "baseline,$POLICY" --repeat "$ROUNDS" --drop-caches --max-residue "$RESIDUE" "${pred[@]}" --json "$b" > "$WORK/$name-replay.json"
		fi
		if [ "$PAIRED" -gt 0 ]; then
			# Its replays right after it: the machine drifts by 10-20%
			# within minutes, and a recording compared with replays made
			# after all the others measured the drift as much as replay.
			if [ -n "$UNTRACED" ] && [ $((i % 2)) = 0 ]; then untraced_replay "$b" "$name-$i"; fi
			pw+=("$(paired_replay "$WORK/$name-$i-baseline.json" "$b")")
			if [ -n "$UNTRACED" ] && [ $((i % 2)) = 1 ]; then untraced_replay "$b" "$name-$i"; fi
		fi
	done
	if [ -n "$UNTRACED" ] && [ "$PAIRED" -gt 0 ]; then
		untraced+=("$(python3 - "$name" "${plain[*]}" "${walls[*]}" "${pw[*]}" "${uw[*]}" "${ucost[*]}" "${sw[*]}" "${usw[*]}" <<'EOF'
import sys, statistics as st
name = sys.argv[1]
plain, rec, rep, un, cost, sim, usim = ([float(x) for x in a.split()] for a in sys.argv[2:9])
mp, mr, mrep, mun, ms_, mus = st.median(plain), st.median(rec), st.median(rep), st.median(un), st.median(sim), st.median(usim)
ms = lambda x: f"{x/1e6:.1f} ms"
e = lambda x: f"{(x-mp)/mp*100:+.1f}%"
print(f"| {name} | {ms(mp)} | {ms(mr)} | {ms(mrep)} | {e(mrep)} | {ms(mun)} | {e(mun)} | {ms(st.median(cost))} | {ms(ms_)} | {e(ms_)} | {ms(mus)} | {e(mus)} |")
EOF
)")
	fi
	first=${walls[0]}
	med=$(printf '%s\n' "${walls[@]}" | median)
	pmed=$(printf '%s\n' "${plain[@]}" | median)
	spread="$(printf '%s\n' "${walls[@]}" | sort -n | head -1) $(printf '%s\n' "${walls[@]}" | sort -n | tail -1)"
	pspread="$(printf '%s\n' "${plain[@]}" | sort -n | head -1) $(printf '%s\n' "${plain[@]}" | sort -n | tail -1)"
	if [ "$PAIRED" -gt 0 ]; then
		paired+=("$(python3 - "$name" "${walls[*]}" "${pw[*]}" <<'EOF'
import sys, statistics as st
name, rec, rep = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
errs = sorted(abs(p - r) / r * 100 for r, p in zip(rec, rep))
ms = lambda xs: ", ".join(f"{x/1e6:.1f}" for x in xs)
mr, mp = st.median(rec), st.median(rep)
print(f"| {name} | {ms(rec)} | {ms(rep)} | {st.median(errs):.1f}% ({errs[0]:.1f}-{errs[-1]:.1f}%) | {mp/1e6:.1f} vs {mr/1e6:.1f} ms: {abs(mp-mr)/mr*100:.1f}% |")
EOF
)")
	fi
	out=$WORK/$name-replay.json
	rows=$(python3 - "$name" "$first" "$med" "$out" "$pmed" $spread $pspread <<'EOF'
import json, sys
name, first, med, path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
pmed, rlo, rhi, plo, phi = (float(x) for x in sys.argv[5:10])
d = json.load(open(path))
s = d["summary"]
ms = lambda ns: f"{ns/1e6:.1f} ms"
pol = {p["policy"]: p for p in s["policies"]}
rw = pol["baseline"]["wall_ns"]["median"]
bw = pol["baseline"]["wall_ns"]
ms1 = lambda ns: f"{ns/1e6:.1f}"
print(f"T| {name} | {ms(first)} | {ms(med)} ({ms1(rlo)}–{ms1(rhi)}) | {ms(pmed)} ({ms1(plo)}–{ms1(phi)}) | {ms(rw)} ({ms1(bw['min'])}–{ms1(bw['max'])}) | {abs(rw-first)/first*100:.1f}% | {abs(rw-med)/med*100:.1f}% | {abs(rw-pmed)/pmed*100:.1f}% |")
for spec, p in pol.items():
    m, pw = p["wall_ns"]["median"], p["predicted_wall_ns"]
    busy = lambda ns: ms(ns) if ns else "—"
    print(f"P| {name} | {spec} | {ms(m)} | {ms(pw)} | {abs(pw-m)/m*100:.1f}% | {p['speedup']:.2f}× | {p['predicted_speedup']:.2f}× | {busy(p['backend_busy_ns']['median'])} | {busy(p.get('predicted_backend_busy_ns', 0))} |")
print(f"C{s['predicted_calibrated']}")
print("K")
print(f"K{name}: recorded against replayed per kind (baseline, median of the rounds)")
print("K")
print("K| kind | ops | service recorded | replayed | predicted | think recorded | waited | predicted |")
print("K|---|---|---|---|---|---|---|---|")
for f in s.get("fidelity", []):
    print(f"K| {f['kind']} | {f['ops']} | {ms(f['recorded_service_ns'])} | {ms(f['service_ns'])} | {ms(f.get('predicted_service_ns', 0))} | {ms(f['recorded_think_ns'])} | {ms(f['wait_ns'])} | {ms(f.get('predicted_think_ns', 0))} |")
EOF
)
	while IFS= read -r line; do
		case $line in
		T*) timing+=("${line:1}") ;;
		P*) prediction+=("${line:1}") ;;
		C*) calibrated=${line:1} ;;
		K*) kinds+=("${line:1}") ;;
		esac
	done <<< "$rows"
done
printf '%s\n' "${timing[@]}"
echo
if [ -n "$UNTRACED" ]; then
	echo "untraced: each recording replayed $PAIRED times as recorded and $PAIRED times with --untraced, alternated; against the program run untraced"
	echo
	printf '%s\n' "${untraced[@]}"
	echo
fi
if [ "$PAIRED" -gt 0 ]; then
	echo "paired: each recording replayed $PAIRED times (baseline, kernel backend, recorded timing)"
	echo
	printf '%s\n' "${paired[@]}"
	echo
fi
echo "prediction: simulate through replay's predicted column (predicted_calibrated: $calibrated), baseline and $POLICY"
echo
printf '%s\n' "${prediction[@]}"
printf '%s\n' "${kinds[@]}"
echo
echo "replay-fidelity: bundles and replay JSON under $WORK"
