#!/usr/bin/env bash
# setup.sh installs what predictio's build, tests and demo need on a fresh
# Debian 12 machine of this kind (run as root): Debian packages and Go modules.
# libreoffice-writer-nogui (50 packages, 249 MiB installed, about 36 s here)
# is the large program of predictio eval's launch suite and of
# scripts/bench-launch.sh.
# Node.js 20 with npm (for the DuckDB/polars interop check) comes with this
# kind of machine; Debian's own nodejs 18 is too old for it.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(clang llvm bpftool libbpf-dev fio sqlite3 lmdb-utils liblmdb-dev strace qemu-system-x86 busybox-static cpio e2fsprogs kmod gcc gcc-12 make xz-utils util-linux nodejs rocksdb-tools libreoffice-writer-nogui)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: need root to apt-get install ${missing[*]}; rerun with sudo" >&2
		exit 1
	fi
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
go mod download

# node-llama-cpp's prebuilt llama.cpp, for predictio eval's llm suite (and
# the llama.cpp workload of docs/adapters.md), into $PREDICTIO_LLM_DIR
# (default /var/tmp/llm); without it the llm suite reports what to install.
llama_dir=${PREDICTIO_LLM_DIR:-/var/tmp/llm}
if [ ! -d "$llama_dir/node_modules/node-llama-cpp" ] && command -v npm >/dev/null; then
	echo "setup: installing node-llama-cpp 3.22.1 into $llama_dir"
	mkdir -p "$llama_dir"
	if ! (cd "$llama_dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund --loglevel=error node-llama-cpp@3.22.1 >/dev/null); then
		echo "setup: npm install node-llama-cpp@3.22.1 failed; predictio eval --suite llm will say it is missing" >&2
	fi
fi
