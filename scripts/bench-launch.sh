#!/usr/bin/env bash
# bench-launch.sh measures cold launches of real programs with predictio's
# live runtime (issue 12 items 6 and 7): python3 (the pyenv shim on PATH and
# /usr/bin/python3) importing 12 stdlib modules, node requiring 5 core
# modules, gcc compiling a C file, sqlite3 querying a 60 MiB database and
# LibreOffice converting a document; each cold (drop_caches, verified),
# baseline / run-noop / run / daemon-noop / daemon alternating for ROUNDS
# rounds (default 7) after LEARN learned launches (default 3); then warm
# launches for the noop overhead, and the daemon's cost on unrelated work.
# Results go to OUT (default /var/tmp/bench-launch): *.json, *.md, *.png.
#
#   sudo scripts/bench-launch.sh                 # the quiet measurement run
#   sudo ROUNDS=5 PROGRAMS=python3,sqlite3 scripts/bench-launch.sh
#   sudo INSTALL=1 scripts/bench-launch.sh       # apt-get install libreoffice-writer-nogui first
#
# Run it on a quiet machine: every figure is a wall-clock time.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-7}
LEARN=${LEARN:-3}
OUT=${OUT:-/var/tmp/bench-launch}
PROGRAMS=${PROGRAMS:-python3,python3-system,node,gcc,sqlite3,libreoffice}

if [ "$(id -u)" -ne 0 ]; then
	echo "bench-launch: needs root (drop_caches, eBPF); rerun with sudo" >&2
	exit 1
fi
if ! command -v soffice >/dev/null && [ "${INSTALL:-0}" = 1 ]; then
	# LibreOffice headless: several hundred MB from Debian's packages.
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libreoffice-writer-nogui
fi
if ! command -v soffice >/dev/null; then
	echo "bench-launch: soffice not installed: libreoffice is skipped (INSTALL=1 installs libreoffice-writer-nogui)" >&2
fi

mkdir -p "$OUT"
go build -o "$OUT/predictio" ./cmd/predictio
P="$OUT/predictio"

# Cold launches, every mode.
"$P" bench launch --predictio "$P" --programs "$PROGRAMS" --rounds "$ROUNDS" --learn "$LEARN" \
	--json "$OUT/cold.json" --plot "$OUT/cold.png" --markdown "$OUT/cold.md"
# Warm launches: what the runtime costs when there is nothing to prefetch
# (noop overhead targets: daemon <= 2%, run <= 15 ms).
"$P" bench launch --predictio "$P" --programs "$PROGRAMS" --rounds "$ROUNDS" --learn "$LEARN" --warm \
	--json "$OUT/warm.json" --plot "$OUT/warm.png" --markdown "$OUT/warm.md"
# The daemon's cost on an unrelated, unprofiled workload (target <= 1%).
"$P" bench launch --predictio "$P" --overhead-only --rounds "$ROUNDS" \
	--json "$OUT/overhead.json" --markdown "$OUT/overhead.md"
# What predictio run adds around a command (target <= 20 ms), warm binary.
PREDICTIO_BIN="$P" go test -run '^$' -bench BenchmarkRunOverhead -benchtime 20x ./live | tee "$OUT/run-overhead.txt"
# Kernel event -> consumer latency of the LowLatency mode (p50 <= 20 us, p99 <= 200 us).
go test -run '^$' -bench BenchmarkLatency -benchtime 1x ./source | tee "$OUT/latency.txt"
cat "$OUT/cold.md" "$OUT/warm.md" "$OUT/overhead.md"
