#!/usr/bin/env bash
# llm-noop-ab.sh measures what `predictio run` costs llama.cpp's no-mmap
# model load when it prefetches nothing (the eval's noop mode), with the
# event delivery of each --latency setting, against the load alone: cold
# (drop_caches, fincore-verified), the modes alternating, N rounds.
#   scripts/llm-noop-ab.sh MODEL.gguf [ROUNDS]
# Needs root, node-llama-cpp in $PREDICTIO_LLM_DIR (default /var/tmp/llm,
# scripts/setup.sh) and predictio on PATH (or $PREDICTIO).
set -euo pipefail
model=$(realpath "$1")
rounds=${2:-5}
dir=${PREDICTIO_LLM_DIR:-/var/tmp/llm}
pio=${PREDICTIO:-predictio}
cd "$dir"
[ -f load.mjs ] || { echo "llm-noop-ab: no $dir/load.mjs; run predictio eval --suite llm --quick once" >&2; exit 1; }
run_mode() {
	case $1 in
	baseline) node load.mjs "$model" nommap ;;
	noop-low) "$pio" run --no-profile --policy tensor --backend none --latency low -- node load.mjs "$model" nommap ;;
	noop-batched) "$pio" run --no-profile --policy tensor --backend none --latency batched -- node load.mjs "$model" nommap ;;
	esac
}
printf 'round\tmode\twall_s\tcold\n'
for r in $(seq "$rounds"); do
	for m in baseline noop-low noop-batched; do
		sync
		echo 3 > /proc/sys/vm/drop_caches
		res=$(fincore --bytes --noheadings --output RES "$model" | tr -d ' ')
		t0=$(date +%s.%N)
		run_mode "$m" > /dev/null 2>&1
		t1=$(date +%s.%N)
		printf '%s\t%s\t%.3f\t%s\n' "$r" "$m" "$(echo "$t1 - $t0" | bc)" "$([ "$res" = 0 ] && echo verified || echo "no: $res bytes resident")"
	done
done
