#!/usr/bin/env bash
# extract-btf.sh writes the BTF of the kernels the VM harness boots into
# source/testdata/btf/KVER.btf.zst, for TestCOREOtherKernels (CO-RE
# relocations of every program against 6.1 and 6.12, checked on any host).
#
#   scripts/extract-btf.sh [KVER-ROOT ...]
#
# Each argument is a kernel root the harness unpacked
# (kmod/vmtest/cache/root-KVER, made by kmod/vmtest/run.sh); default: all of
# them. The .BTF section is taken from the vmlinux inside the compressed
# vmlinuz (lz4, zstd, xz or gzip). Needs python3, objcopy, zstd and the
# decompressors.
set -euo pipefail
cd "$(dirname "$0")/.."
out=source/testdata/btf
mkdir -p "$out"
roots=("$@")
[ ${#roots[@]} -gt 0 ] || roots=(kmod/vmtest/cache/root-*)
for root in "${roots[@]}"; do
	[ -d "$root/boot" ] || { echo "extract-btf: $root has no boot/ (run kmod/vmtest/run.sh first)" >&2; exit 1; }
	vmlinuz=$(ls "$root"/boot/vmlinuz-* | head -1)
	kver=${vmlinuz##*/vmlinuz-}
	tmp=$(mktemp -d)
	python3 - "$vmlinuz" "$tmp/vmlinux" <<'PY'
import subprocess, sys
data = open(sys.argv[1], 'rb').read()
decoders = [(b'\x02\x21\x4c\x18', ['lz4', '-dc']), (b'\x28\xb5\x2f\xfd', ['zstd', '-dc']),
            (b'\xfd7zXZ\x00', ['xz', '-dc']), (b'\x1f\x8b\x08', ['gzip', '-dc'])]
for magic, cmd in decoders:
    i = data.find(magic)
    while i >= 0:
        p = subprocess.run(cmd, input=data[i:], capture_output=True)
        if p.stdout[:4] == b'\x7fELF':
            open(sys.argv[2], 'wb').write(p.stdout)
            sys.exit(0)
        i = data.find(magic, i + 1)
sys.exit("no compressed vmlinux found in " + sys.argv[1])
PY
	objcopy -O binary --only-section=.BTF "$tmp/vmlinux" "$tmp/btf"
	zstd -19 -q -f -o "$out/$kver.btf.zst" "$tmp/btf"
	rm -rf "$tmp"
	echo "extract-btf: $out/$kver.btf.zst"
done
