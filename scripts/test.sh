#!/usr/bin/env bash
# test.sh is predictio's test command, on a fresh machine of this kind, as root:
# it installs what the tests need, checks formatting, vet and generated files,
# and runs every test, including the ones that need root, eBPF, io_uring and
# O_DIRECT, and the kernel-module tests under qemu.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:-}

scripts/setup.sh

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then echo "gofmt: not formatted:"; echo "$bad"; exit 1; fi

echo "== go vet"
go vet ./...

if [ -x scripts/bpf-check.sh ]; then
	echo "== bpf2go drift check"
	scripts/bpf-check.sh
fi

echo "== go test"
go test -count=1 -timeout 30m ./...

echo "== go test -race (uring, engine)"
race_pkgs=$(go list ./uring/... ./engine/... 2>/dev/null || true)
if [ -n "$race_pkgs" ]; then go test -count=1 -race -timeout 20m $race_pkgs; fi

if [ -x kmod/vmtest/run.sh ]; then
	echo "== kernel module and 6.1 tests under qemu"
	kmod/vmtest/run.sh
	# The newest 6.12 cloud kernel too: the read/fault/map tracepoints of a
	# kernel other than the host's, and the module on a newer API.
	echo "== kernel module and 6.12 tests under qemu"
	PREDICTIO_VM_KVER=6.12 kmod/vmtest/run.sh
fi
echo "== interop (DuckDB, polars)"; scripts/interop-check.sh
echo "== all tests passed"
