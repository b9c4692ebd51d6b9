#!/usr/bin/env python3
"""read-fit.py BUNDLE [PREDICTIO]: how the recording's cold reads took their
time. Each read row with a service time (format 1.1) is matched with the
cache_add rows of its thread and file inside its span (the pages it had to
read); over the reads that added pages it prints their count, their pages,
and a least-squares fit of the service time against the pages added:
a µs + b µs a page. Set it beside a device profile's model (docs/simulate.md,
"File rates"):

  scripts/read-fit.py /var/tmp/predictio-fidelity/python-1.bundle
"""
import bisect
import collections
import csv
import io
import subprocess
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
tool = sys.argv[2] if len(sys.argv) > 2 else './predictio'
out = subprocess.run([tool, 'trace', 'cat', '--table', 'accesses', '--format', 'csv', sys.argv[1]],
                     check=True, capture_output=True, text=True).stdout
adds = collections.defaultdict(list)  # (tid, file) -> [(ts, pages)]
reads = []
for r in csv.DictReader(io.StringIO(out)):
    if r['kind'] == 'cache_add':
        adds[(r['tid'], r['file_id'])].append((int(r['ts_ns']), int(r['npages'])))
    elif r['kind'] == 'read' and r['end_ns'] != '0':
        reads.append((int(r['ts_ns']), int(r['end_ns']), r['tid'], r['file_id']))
for l in adds.values():
    l.sort()
cold = []  # (pages added, service µs)
for ts, end, tid, f in reads:
    l = adds[(tid, f)]
    i = bisect.bisect_left(l, (ts, 0))
    pages = 0
    while i < len(l) and l[i][0] <= end:
        pages += l[i][1]
        i += 1
    if pages:
        cold.append((pages, (end - ts) / 1000))
if len(cold) < 2:
    sys.exit(f'{sys.argv[1]}: {len(cold)} cold reads with service times; nothing to fit')
n = len(cold)
mp = sum(p for p, _ in cold) / n
my = sum(y for _, y in cold) / n
var = sum((p - mp) ** 2 for p, _ in cold)
b = sum((p - mp) * (y - my) for p, y in cold) / var if var else 0
a = my - b * mp
print(f'{n} cold reads of {sum(p for p, _ in cold)} pages, {sum(y for _, y in cold) / 1000:.1f} ms: '
      f'{a:.1f} µs + {b:.2f} µs a page (least squares)')
