#!/usr/bin/env bash
# make-testdata.sh regenerates the trace bundles and trace samples in
# testdata/ that the tests, the examples and the README's default job use:
#
#   testdata/seq, stride, random     synthetic access patterns (predictio trace synth)
#   testdata/btree                   B-tree range scans with tree_child_enter hints
#   testdata/sparse-run1..4          four runs of one recurring sparse pattern
#   testdata/fio/randread.iolog      a real fio iolog v3 (fio --write_iolog)
#   testdata/csv/msr-sample.csv      a small CSV in the MSR Cambridge layout
#   testdata/csv/alibaba-sample.csv  a small CSV in the Alibaba block trace layout
#   testdata/blkparse/sample.txt     blkparse default text output
#   testdata/fio-bundle, msr-bundle  the samples imported (predictio trace import)
#
# Synthetic bundles are deterministic (fixed seeds). The fio iolog holds real
# timestamps, so it differs from run to run. The CSV samples are generated
# here (they are not real MSR or Alibaba data); the blkparse sample is
# written out below because blktrace needs a real block device to record.
# Needs: go, fio. Keeps testdata/ well under 5 MiB (checked at the end).
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d /var/tmp/predictio-testdata.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/predictio
go build -o "$bin" ./cmd/predictio

rm -rf testdata/seq testdata/stride testdata/random testdata/btree testdata/sparse-run? \
	testdata/fio testdata/csv testdata/blkparse testdata/fio-bundle testdata/msr-bundle
mkdir -p testdata/fio testdata/csv testdata/blkparse

"$bin" trace synth -o testdata/seq --pattern seq --events 100000 --seed 1
"$bin" trace synth -o testdata/stride --pattern stride --events 20000 --seed 1
"$bin" trace synth -o testdata/random --pattern random --events 20000 --seed 1
"$bin" trace synth -o testdata/btree --pattern btree --events 20000 --seed 1
for run in 1 2 3 4; do
	"$bin" trace synth -o testdata/sparse-run$run --pattern sparse --events 20000 --seed 1 --run $run
done

# A real fio iolog v3: 4 KiB random reads then 64 KiB sequential reads.
data=/var/tmp/predictio-fio-data
fio --name=randread --filename=$data --size=8M --rw=randread --bs=4k --ioengine=psync \
	--number_ios=300 --randseed=42 --write_iolog=$tmp/r.iolog >/dev/null
fio --name=seqread --filename=$data --size=8M --rw=read --bs=64k --ioengine=psync \
	--number_ios=100 --write_iolog=$tmp/s.iolog >/dev/null
rm -f $data
{ cat $tmp/r.iolog; tail -n +2 $tmp/s.iolog | awk -v off="$(tail -n 1 $tmp/r.iolog | cut -d' ' -f1)" '{ $1 = $1 + off; print }'; } \
	>testdata/fio/randread.iolog

# MSR Cambridge layout: Timestamp (filetime),Hostname,DiskNumber,Type,Offset,Size,ResponseTime.
# awk numbers are doubles and mawk's %d stops at 2^31: print with %.0f, keep
# values below 2^53, and build the 18-digit filetime from a fixed prefix.
awk 'BEGIN {
	t = 0; seed = 7
	for (i = 0; i < 500; i++) {
		seed = (seed * 16807) % 2147483647
		disk = seed % 2; op = (seed % 5 == 0) ? "Write" : "Read"
		off = (i % 3 == 0) ? (seed % 262144) * 4096 : 1073741824 + i * 65536
		size = (i % 3 == 0) ? 4096 : 65536
		t += 1000 + seed % 20000
		printf "12816637%010.0f,usr,%d,%s,%.0f,%d,%d\n", t, disk, op, off, size, 100 + seed % 3000
	}
}' >testdata/csv/msr-sample.csv

# Alibaba layout: device_id,opcode,offset,length,timestamp (microseconds since the epoch).
awk 'BEGIN {
	seed = 11
	for (i = 0; i < 500; i++) {
		seed = (seed * 16807) % 2147483647
		dev = 100 + seed % 3; op = (seed % 4 == 0) ? "W" : "R"
		printf "%d,%s,%.0f,%d,15778%011.0f\n", dev, op, (seed % 1048576) * 4096, 4096 * (1 + seed % 8), 8000000000 + i * 250
	}
}' >testdata/csv/alibaba-sample.csv

# blkparse default output (blkparse -i sda): queue, get request, insert,
# issue and complete events for a reader, a writer and a flush, then the
# per-device summary that blkparse prints at the end.
cat >testdata/blkparse/sample.txt <<'BLK'
  8,0    1        1     0.000000000  4321  Q   R 2048 + 8 [cat]
  8,0    1        2     0.000001512  4321  G   R 2048 + 8 [cat]
  8,0    1        3     0.000002140  4321  P   N [cat]
  8,0    1        4     0.000003007  4321  I   R 2048 + 8 [cat]
  8,0    1        5     0.000004233  4321  U   N [cat] 1
  8,0    1        6     0.000005001  4321  D   R 2048 + 8 [cat]
  8,0    0        1     0.000090412     0  C   R 2048 + 8 [0]
  8,0    1        7     0.000100250  4321  Q   R 2056 + 256 [cat]
  8,0    1        8     0.000101003  4321  G   R 2056 + 256 [cat]
  8,0    1        9     0.000102941  4321  D   R 2056 + 256 [cat]
  8,0    0        2     0.000412077     0  C   R 2056 + 256 [0]
  8,0    1       10     0.000500000  4321  Q  RA 2312 + 256 [cat]
  8,0    1       11     0.000502110  4321  D  RA 2312 + 256 [cat]
  8,0    0        3     0.000790515     0  C  RA 2312 + 256 [0]
  8,0    1       12     0.001200000   977  Q  WS 409600 + 8 [jbd2/sda1-8]
  8,0    1       13     0.001203000   977  D  WS 409600 + 8 [jbd2/sda1-8]
  8,0    1       14     0.001300000   977  Q FWS [jbd2/sda1-8]
  8,0    0        4     0.001390007     0  C  WS 409600 + 8 [0]
  8,16   0        1     0.002000000  5150  Q  RM 96 + 16 [postgres]
  8,16   0        2     0.002004000  5150  D  RM 96 + 16 [postgres]
  8,16   0        3     0.002101000     0  C  RM 96 + 16 [0]
CPU0 (8,0):
 Reads Queued:           0,        0KiB	 Writes Queued:           0,        0KiB
 Read Dispatches:        0,        0KiB	 Write Dispatches:        0,        0KiB
Total (8,0):
 Reads Queued:           3,      260KiB	 Writes Queued:           1,        4KiB
Throughput (R/W): 0KiB/s / 0KiB/s
Events (8,0): 18 entries
BLK

"$bin" trace import --from fio testdata/fio/randread.iolog -o testdata/fio-bundle --page-size 4096 >/dev/null
"$bin" trace import --from csv --preset msr testdata/csv/msr-sample.csv -o testdata/msr-bundle --page-size 4096 >/dev/null

for b in testdata/seq testdata/stride testdata/random testdata/btree testdata/sparse-run? testdata/fio-bundle testdata/msr-bundle; do
	"$bin" trace verify "$b" >/dev/null
done
kib=$(du -sk testdata | cut -f1)
echo "testdata: ${kib} KiB"
if [ "$kib" -ge 5120 ]; then
	echo "make-testdata: testdata is ${kib} KiB, over the 5 MiB budget; lower --events" >&2
	exit 1
fi
