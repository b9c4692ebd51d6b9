#!/usr/bin/env bash
# test.sh is predictio's test command, on a fresh machine of this kind, as root:
# it installs what the tests need, checks formatting, vet and generated files,
# and runs every test, including the ones that need root, eBPF, io_uring and
# O_DIRECT, and the kernel-module tests under qemu.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:-}
# The toolchain CI builds, tests and scans with. The machine's own Go
# (1.26.8) has standard-library vulnerabilities that govulncheck reports
# (fixed in 1.26.9 and 1.26.10); go1.27.3 is the newer toolchain the Go
# module proxy serves here, and the go command fetches it (76 MB) on first
# use. go.mod still says go 1.26.0, so the machine's Go builds the code too.
export GOTOOLCHAIN=${GOTOOLCHAIN_CI:-go1.27.3}

scripts/setup.sh

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then echo "gofmt: not formatted:"; echo "$bad"; exit 1; fi

echo "== go vet"
go vet ./...

scripts/lint.sh # go mod tidy -diff, staticcheck, govulncheck

if [ -x scripts/bpf-check.sh ]; then
	echo "== bpf2go drift check"
	scripts/bpf-check.sh
fi

echo "== go test"
# One package at a time: the tests of several packages (replay, policies,
# backend, record, effect) evict, drop or compare the system's page cache and
# dentry cache for real (drop_caches, POSIX_FADV_DONTNEED, readahead traced
# against the kernel), which packages running side by side would disturb.
go test -p 1 -count=1 -timeout 45m ./...

echo "== go test -race (uring, engine; the source's shutdown)"
race_pkgs=$(go list ./uring/... ./engine/... 2>/dev/null || true)
if [ -n "$race_pkgs" ]; then go test -count=1 -race -timeout 20m $race_pkgs; fi
# The poll ticker against Close: the race detector sees the ring closed
# under a tick where a plain run crashes once in hundreds.
go test -count=1 -race -timeout 10m -run 'TestCloseUnderTicks' ./source

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
