#!/usr/bin/env bash
# run.sh boots Debian's 6.1 cloud kernel under qemu and runs the kernel
# module tests (package kmod), the kmod replay test, the record and source
# tests and the readahead model's validation (policies TestReadahead*) inside
# it.
#
#   kmod/vmtest/run.sh          # tests; exit status says whether they passed
#   kmod/vmtest/run.sh -bench   # BenchmarkVMResident inside the VM
#
# It fetches the kernel image and headers with apt-get download into
# kmod/vmtest/cache (gitignored; reused on later runs), builds predictio.ko
# against those headers, builds static Go test binaries, packs a busybox
# initramfs with them and the virtio modules, attaches an ext4 disk on
# virtio-blk and collects results and the kernel log over the serial
# console. It fails when a test fails or the kernel log shows BUG:,
# WARNING:, Oops or a KASAN report.
#
# Needs: apt-get, dpkg-deb, gcc-12, make, qemu-system-x86_64,
# busybox (static), cpio, gzip, mkfs.ext4, go. Environment:
#   PREDICTIO_VM_KVER   kernel release (default 6.1.0-57-cloud-amd64), or a
#                       series such as 6.12 for the newest Debian cloud kernel of it
#   PREDICTIO_VM_ACCEL  qemu accelerator (default tcg; kvm where it works)
#   PREDICTIO_VM_TCG_THREAD  TCG threading, single or multi (default single:
#                       multi-threaded TCG can keep executing a stale int3 after
#                       the guest patches its code, see docs/kmod.md)
#   PREDICTIO_VM_TIMEOUT seconds before the VM is killed (default 900)
#   PREDICTIO_VM_RECORD  0 to leave the record tests out of the VM (default 1)
#   PREDICTIO_VM_SMP     virtual CPUs (default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

mode=test
case "${1:-}" in
-bench) mode=bench ;;
"") ;;
*) echo "usage: $0 [-bench]" >&2; exit 2 ;;
esac

kver=${PREDICTIO_VM_KVER:-6.1.0-57-cloud-amd64}
accel=${PREDICTIO_VM_ACCEL:-tcg}
tcgthread=${PREDICTIO_VM_TCG_THREAD:-single}
case $tcgthread in
single | multi) ;;
*) echo "vmtest: PREDICTIO_VM_TCG_THREAD=$tcgthread: want single or multi" >&2; exit 2 ;;
esac
accelopt=$accel
[ "$accel" = tcg ] && accelopt=tcg,thread=$tcgthread
vmtimeout=${PREDICTIO_VM_TIMEOUT:-900}
cache=$repo/kmod/vmtest/cache
root=$cache/root-$kver
start=$(date +%s)
log() { echo "vmtest: $*"; }

need=(apt-get dpkg-deb gcc-12 make qemu-system-x86_64 busybox cpio gzip mkfs.ext4 go)
for c in "${need[@]}"; do
	command -v "$c" >/dev/null || { echo "vmtest: $c not found: run scripts/setup.sh (see docs/kmod.md)" >&2; exit 1; }
done

# A bare series ("6.12") means the newest cloud kernel of that series that
# Debian's linux-image-SERIES-cloud-amd64 metapackage depends on.
if [[ $kver =~ ^[0-9]+\.[0-9]+$ ]]; then
	series=$kver
	meta=linux-image-$series-cloud-amd64
	apt-cache show "$meta" >/dev/null 2>&1 || apt-get update -q >/dev/null || true
	kver=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {sub("linux-image-", "", $2); print $2; exit}')
	if [ -z "$kver" ]; then
		echo "vmtest: PREDICTIO_VM_KVER=$series: no package $meta in the apt sources (add bookworm-backports for 6.12)" >&2
		exit 1
	fi
	log "kernel series $series: $kver"
	root=$cache/root-$kver
fi

# 1. Kernel image and headers, cached. Debian drops superseded kernel ABIs
# from the archive; without PREDICTIO_VM_KVER, fall back to the 6.1 cloud
# kernel that linux-image-cloud-amd64 now depends on.
if [ ! -e "$root/.done" ] && [ -z "${PREDICTIO_VM_KVER:-}" ]; then
	if ! apt-cache show "linux-image-$kver" >/dev/null 2>&1; then
		apt-get update -q >/dev/null || true
	fi
	if ! apt-cache show "linux-image-$kver" >/dev/null 2>&1; then
		cur=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {sub("linux-image-", "", $2); print $2; exit}')
		if [ -n "$cur" ]; then
			log "linux-image-$kver is no longer in the archive; using $cur"
			kver=$cur
			root=$cache/root-$kver
		fi
	fi
fi
if [ ! -e "$root/.done" ]; then
	abi=${kver%-cloud-amd64}
	case $kver in
	6.1.0-*) kbuild=linux-kbuild-6.1 ;; # Debian 12's own kernel
	*) kbuild=linux-kbuild-$abi ;;      # e.g. 6.12.117+deb12-cloud-amd64
	esac
	pkgs=(linux-image-$kver linux-headers-$kver linux-headers-$abi-common $kbuild)
	log "fetching ${pkgs[*]}"
	mkdir -p "$cache/debs"
	rm -rf "$root"
	mkdir -p "$root"
	(
		cd "$cache/debs"
		if ! apt-get download "${pkgs[@]}" 2>/dev/null; then
			apt-get update -q >/dev/null
			apt-get download "${pkgs[@]}"
		fi
	)
	for p in "${pkgs[@]}"; do
		deb=$(ls -t "$cache"/debs/"${p}"_*.deb | head -1)
		dpkg-deb -x "$deb" "$root"
	done
	# The headers include their common half and kbuild tools by absolute
	# path; point them into the cache instead of /usr.
	sed -i "s|include /usr/src/|include $root/usr/src/|" "$root/usr/src/linux-headers-$kver/Makefile"
	touch "$root/.done"
fi
kdir=$root/usr/src/linux-headers-$kver
vmlinuz=$root/boot/vmlinuz-$kver
kmods=$root/lib/modules/$kver/kernel

# 2. The module, built from a copy so the source tree stays clean. Each run
# has its own build directory, so concurrent runs do not collide.
build=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$build"' EXIT
mkdir -p "$build/module" "$build/initramfs"
cp kmod/module/predictio.c kmod/module/Kbuild "$build/module/"
cp kmod/predictio_uapi.h "$build/"
log "building predictio.ko against $kver"
make -s -C "$kdir" M="$build/module" CONFIG_DEBUG_INFO_BTF_MODULES= modules 2>&1 | grep -v "Skipping BTF generation" || true
[ -f "$build/module/predictio.ko" ] || { echo "vmtest: module build failed" >&2; exit 1; }

# 3. Static test binaries.
log "building test binaries"
CGO_ENABLED=0 go test -c -o "$build/initramfs/kmod.test" ./kmod
record=no
if [ "$mode" = test ] && [ "${PREDICTIO_VM_RECORD:-1}" = 1 ] && ls record/*_test.go >/dev/null 2>&1; then
	if CGO_ENABLED=0 go test -c -o "$build/initramfs/record.test" ./record; then
		record=yes
	else
		echo "vmtest: record tests do not build; not run" >&2
	fi
fi

# The event source's own tests (package source) run with the record tests.
srctest=no
if [ "$record" = yes ] && CGO_ENABLED=0 go test -c -o "$build/initramfs/source.test" ./source; then
	srctest=yes
fi

# replay's kmod backend test (TestKmodOracle) runs against the module too.
replay=no
if true; then
	if CGO_ENABLED=0 go test -c -o "$build/initramfs/replay.test" ./replay; then
		replay=yes
	else
		echo "vmtest: replay tests do not build; the kmod replay test is not run" >&2
	fi
fi

# The readahead model's validation against this kernel (policies
# TestReadahead*): kprobes stand in for the readahead tracepoints 6.1 and
# 6.12 lack, and a spare ext4 disk (vdb) for the loop devices the
# initramfs cannot make.
policies=no
if [ "$mode" = test ]; then
	if CGO_ENABLED=0 go test -c -o "$build/initramfs/policies.test" ./policies; then
		policies=yes
	else
		echo "vmtest: policies tests do not build; the readahead validation is not run" >&2
	fi
fi

# The predictio command, to report which event kinds the recorder gets from
# this kernel (informational; the record tests above are what pass or fail).
if [ "$record" = yes ] && ! CGO_ENABLED=0 go build -o "$build/initramfs/predictio" ./cmd/predictio; then
	echo "vmtest: predictio command does not build; no recording report" >&2
fi

# 4. Initramfs: busybox, virtio modules, predictio.ko, tests, init.
ir=$build/initramfs
mkdir -p "$ir"/{bin,proc,sys,dev,mnt,tmp,lib/modules}
bb=$(command -v busybox)
if readelf -l "$bb" 2>/dev/null | grep -q 'program interpreter'; then
	echo "vmtest: $bb is dynamically linked; the initramfs needs busybox-static (apt-get install busybox-static)" >&2
	exit 1
fi
cp "$bb" "$ir/bin/busybox"
vmods="virtio/virtio_ring virtio/virtio virtio/virtio_pci_modern_dev virtio/virtio_pci_legacy_dev virtio/virtio_pci block/virtio_blk"
for m in $vmods; do
	src=$kmods/drivers/$m.ko
	if [ -f "$src" ]; then
		cp "$src" "$ir/lib/modules/"
	elif [ -f "$src.xz" ]; then
		xz -dc "$src.xz" >"$ir/lib/modules/$(basename "$m").ko"
	else
		grep -q "/$m.ko" "$root/lib/modules/$kver/modules.builtin" || { echo "vmtest: $m neither module nor built in" >&2; exit 1; }
	fi
done
cp "$build/module/predictio.ko" "$ir/predictio.ko"
cat >"$ir/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# cgroup v2, so the record tests follow commands and --cgroup as on a host
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null || echo "@@VM cgroup2 mount failed"
for m in $(for m in $vmods; do basename "$m"; done | tr '\n' ' '); do
	[ -f /lib/modules/\$m.ko ] && insmod /lib/modules/\$m.ko
done
i=0; while [ ! -b /dev/vda ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done
mount -t ext4 /dev/vda /mnt || echo "@@VM mount failed"
mkdir -p /mnt/tmp /mnt/var-tmp /var/tmp
mount --bind /mnt/var-tmp /var/tmp
export PREDICTIO_VM=1 PREDICTIO_KO=/predictio.ko PREDICTIO_DATA=/mnt TMPDIR=/mnt/tmp HOME=/ GOTRACEBACK=all
echo "@@VM kernel \$(uname -r)"
if [ "$mode" = bench ]; then
	/kmod.test -test.run '^\$' -test.bench VMResident -test.benchtime 20x -test.v
	echo "@@RESULT kmod rc=\$?"
	if [ -x /replay.test ]; then
		/replay.test -test.run '^\$' -test.bench KmodVsKernel -test.benchtime 5x -test.v
		echo "@@RESULT replay rc=\$?"
	fi
else
	/kmod.test -test.v -test.count=1 -test.timeout 10m
	echo "@@RESULT kmod rc=\$?"
	if [ -x /replay.test ]; then
		/replay.test -test.v -test.count=1 -test.run Kmod -test.timeout 5m
		echo "@@RESULT replay rc=\$?"
	fi
	mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
	for g in filemap readahead; do
		echo "@@TRACEPOINTS \$g: \$(ls /sys/kernel/tracing/events/\$g 2>/dev/null | grep -v -e enable -e filter | tr '\n' ' ')"
	done
	if [ -x /record.test ]; then
		/record.test -test.v -test.count=1 -test.timeout 10m
		echo "@@RESULT record rc=\$?"
	fi
	if [ -x /policies.test ]; then
		i=0; while [ ! -b /dev/vdb ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done
		PREDICTIO_RA_BLOCKDEV=/dev/vdb /policies.test -test.v -test.count=1 -test.run Readahead -test.timeout 10m
		echo "@@RESULT policies rc=\$?"
	fi
	if [ -x /source.test ]; then
		/source.test -test.v -test.count=1 -test.timeout 5m
		echo "@@RESULT source rc=\$?"
	fi
	if [ -x /predictio ]; then
		head -c 8388608 /dev/urandom >/mnt/rec.bin
		sync
		echo 1 >/proc/sys/vm/drop_caches
		/predictio record -o /mnt/rec.bundle -- cat /mnt/rec.bin >/dev/null 2>/mnt/rec.log
		echo "@@RECORD rc=\$? \$(tail -n 2 /mnt/rec.log | tr '\n' ' ')"
		/predictio trace info /mnt/rec.bundle 2>&1 | grep -E '^(events|kind)' | sed 's/^/@@RECORD /'
	fi
fi
echo "@@DMESG-BEGIN"
dmesg
echo "@@DMESG-END"
sync
umount /mnt
poweroff -f
EOF
chmod +x "$ir/init"
(cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1 >"$build/initramfs.gz")

# 5. Data disk: ext4 on virtio-blk; a second one for the readahead
# validation, which sets its read_ahead_kb.
truncate -s 1G "$build/disk.img"
mkfs.ext4 -q -F "$build/disk.img"
truncate -s 512M "$build/ra.img"
mkfs.ext4 -q -F "$build/ra.img"

# 6. Boot.
log "booting $kver ($accelopt)"
console=$cache/console-$mode.log
[ -n "${PREDICTIO_VM_KVER:-}" ] && console=$cache/console-$mode-$kver.log
set +e
timeout --foreground "$vmtimeout" qemu-system-x86_64 \
	-accel "$accelopt" -cpu max -smp "${PREDICTIO_VM_SMP:-2}" -m 2G \
	-nographic -no-reboot -net none \
	-kernel "$vmlinuz" -initrd "$build/initramfs.gz" \
	-append "console=ttyS0 loglevel=4 panic=-1 oops=panic" \
	-drive file="$build/disk.img",if=virtio,format=raw,cache=unsafe \
	-drive file="$build/ra.img",if=virtio,format=raw,cache=unsafe \
	</dev/null 2>&1 | tr -d '\r' | tee "$console" | sed -n '/@@VM/,/@@DMESG-BEGIN/p' | sed 's/^.*@@VM/@@VM/'
qrc=${PIPESTATUS[0]}
set -e
log "VM finished in $(($(date +%s) - start)) s (qemu exit $qrc); console log: $console"

fail=0
if [ "$qrc" -eq 124 ]; then
	echo "vmtest: VM timed out after $vmtimeout s" >&2
	fail=1
fi
kres=$(grep -a '^@@RESULT kmod' "$console" | tail -1 || true)
if [ "$kres" != "@@RESULT kmod rc=0" ]; then
	echo "vmtest: kmod tests failed (${kres:-no result})" >&2
	fail=1
fi
if [ "$replay" = yes ]; then
	pres=$(grep -a '^@@RESULT replay' "$console" | tail -1 || true)
	if [ "$pres" != "@@RESULT replay rc=0" ]; then
		echo "vmtest: replay kmod tests failed (${pres:-no result})" >&2
		fail=1
	fi
fi
if [ "$record" = yes ]; then
	rres=$(grep -a '^@@RESULT record' "$console" | tail -1 || true)
	if [ "$rres" != "@@RESULT record rc=0" ]; then
		echo "vmtest: record tests failed on $kver (${rres:-no result})" >&2
		fail=1
	fi
fi
if [ "$policies" = yes ]; then
	pres=$(grep -a '^@@RESULT policies' "$console" | tail -1 || true)
	if [ "$pres" != "@@RESULT policies rc=0" ]; then
		echo "vmtest: readahead validation (policies tests) failed on $kver (${pres:-no result})" >&2
		fail=1
	fi
fi
if [ "$srctest" = yes ]; then
	sres=$(grep -a '^@@RESULT source' "$console" | tail -1 || true)
	if [ "$sres" != "@@RESULT source rc=0" ]; then
		echo "vmtest: source tests failed on $kver (${sres:-no result})" >&2
		fail=1
	fi
fi
# kernel lines only ("[  12.345678] ..."), from the console and the dmesg dump
bad=$(grep -aE '^\[ *[0-9]+\.[0-9]+\] .*(BUG:|WARNING:|Oops|KASAN|general protection fault|Kernel panic)' "$console" || true)
if [ -n "$bad" ]; then
	echo "vmtest: kernel log shows problems:" >&2
	echo "$bad" >&2
	fail=1
fi
if [ "$fail" -ne 0 ]; then
	exit 1
fi
log "passed"
