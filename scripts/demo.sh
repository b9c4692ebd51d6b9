#!/usr/bin/env bash
# demo.sh is predictio's main job on the bundled default: it installs what it
# needs, builds predictio, then inspects, exports, trains on, simulates and
# replays the bundles in testdata/. Output goes to ${OUT:-/var/tmp/predictio-demo}.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/var/tmp/predictio-demo}
rm -rf "$out"
mkdir -p "$out"
if [ "$(id -u)" -eq 0 ]; then scripts/setup.sh; else go mod download; fi

go build -o "$out/predictio" ./cmd/predictio
p=$out/predictio
step() { printf '\n== %s\n' "$*"; }

step "inspect and verify a bundle"
$p trace info testdata/btree
$p trace verify testdata/btree

step "export it to Parquet (readable by pyarrow, DuckDB, polars)"
$p trace export testdata/btree --parquet "$out/parquet"
ls -l "$out/parquet"

step "simulate the tree policy against the readahead baseline and the oracle"
$p simulate --policy tree --cache 64MiB testdata/btree

step "train markov on three launches, simulate the fourth"
$p train markov -o "$out/launch.model" testdata/sparse-run1 testdata/sparse-run2 testdata/sparse-run3
$p simulate --model "$out/launch.model" --policy markov testdata/sparse-run4

step "replay the fourth launch on real files: baseline against markov, alternating"
$p replay materialize testdata/sparse-run4 "$out/files"
$p replay --root "$out/files" --timing asap --model "$out/launch.model" --ab baseline,markov --repeat 3 testdata/sparse-run4
