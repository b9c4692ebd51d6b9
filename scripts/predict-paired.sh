#!/usr/bin/env bash
# predict-paired.sh predicts the baseline wall of every recording that
# scripts/replay-fidelity.sh left under WORK and compares it with the
# median of that recording's own replays (its PAIRED replays, made right
# after it), for one or more predictio binaries side by side:
#
#   scripts/predict-paired.sh PROFILE BINARY...
#
# prints "workload i measured MS | predicted MS error | ..." per recording.
# Needs python3; reads WORK (default /var/tmp/predictio-fidelity).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/predict-paired.sh PROFILE BINARY..." >&2; exit 2; }
PROF=$1
shift
WORK=${WORK:-/var/tmp/predictio-fidelity}
for w in sqlite python grep threads; do
	for b in "$WORK/$w"-[0-9]*.bundle; do
		[ -d "$b" ] || continue
		i=${b##*-}
		i=${i%.bundle}
		j=$WORK/$w-$i-baseline.json
		[ -s "$j" ] || continue
		m=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print([p for p in d['summary']['policies'] if p['policy']=='baseline'][0]['wall_ns']['median'])" "$j")
		line="$w $i measured $(python3 -c "import sys; print(round(float(sys.argv[1])/1e6, 1))" "$m")"
		for bin in "$@"; do
			p=$("$bin" simulate --json --no-oracle --device-profile "$PROF" "$b" 2>/dev/null |
				python3 -c "import json,sys; j=json.load(sys.stdin); print([l for l in j['policies'] if l['name']=='baseline'][0]['wall_ns'])")
			line="$line | $(python3 -c "import sys; p,m=float(sys.argv[1]),float(sys.argv[2]); print(round(p/1e6,1), '%.1f%%' % (abs(p-m)/m*100))" "$p" "$m")"
		done
		echo "$line"
	done
done
