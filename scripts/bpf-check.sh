#!/usr/bin/env bash
# bpf-check.sh regenerates bpf/'s bpf2go output (Go loaders and .o objects)
# from the committed C sources and vmlinux.h, and fails if the committed
# files drift from what the sources produce. Needs clang, llvm-strip and Go.
set -euo pipefail
cd "$(dirname "$0")/.."
for t in clang llvm-strip; do
	if ! command -v "$t" >/dev/null; then
		echo "bpf-check: $t not found; run scripts/setup.sh (installs clang and llvm)" >&2
		exit 1
	fi
done
go generate ./bpf
if ! git diff --exit-code --stat -- bpf/; then
	echo "bpf-check: generated files in bpf/ differ from the committed ones;" >&2
	echo "bpf-check: run 'go generate ./bpf' and commit the result" >&2
	exit 1
fi
untracked=$(git ls-files --others --exclude-standard -- bpf/)
if [ -n "$untracked" ]; then
	echo "bpf-check: go generate produced untracked files in bpf/: $untracked" >&2
	exit 1
fi
echo "bpf-check: bpf/ generated files match their sources"
