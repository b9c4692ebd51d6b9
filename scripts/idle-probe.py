#!/usr/bin/env python3
"""idle-probe.py: how long a cold read takes after the disk has been idle,
measured from a single-threaded C-like program (Python's os calls), for
docs/BENCHMARKS.md ("the disk after idle"), beside bench device's idle curve.

  idle-probe.py curve FILE        QD1 O_DIRECT reads of FILE (1 and 16 pages)
                                  after sleeps of 0 to 30 ms, 40 reads a gap,
                                  two passes: median, p10, p90 in us
  idle-probe.py files LIST MIB    one pread of each file named in LIST (one
                                  path a line), after drop_caches (run as
                                  root), with MIB MiB of fresh memory
                                  allocated and kept before each read (0:
                                  none): median us per read, by file size

Run FILE through a sequential O_DIRECT pass first (dd iflag=direct) when
the machine is a VM: the host caches the disk image, and a block the host
has not read lately takes several times longer.
"""
import collections
import mmap
import os
import random
import sys
import time


def curve(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 1 << 20)
    mv = memoryview(buf)
    blocks = os.fstat(fd).st_size // 4096
    rng = random.Random(1)

    def lat(gap_ms, pages, n=40):
        out = []
        for _ in range(n):
            if gap_ms > 0:
                time.sleep(gap_ms / 1e3)
            off = rng.randrange(blocks - pages) * 4096
            t = time.perf_counter_ns()
            os.preadv(fd, [mv[: pages * 4096]], off)
            out.append((time.perf_counter_ns() - t) / 1e3)
        out.sort()
        return [round(out[len(out) // 2]), round(out[len(out) // 10]), round(out[len(out) * 9 // 10])]

    for rep in range(2):
        for gap in [0, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30]:
            print(rep, gap, "ms gap: 1 page", lat(gap, 1), " 16 pages", lat(gap, 16))


def files(listing, mib):
    paths = [p for p in open(listing).read().split("\n") if p]
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    by = collections.defaultdict(list)
    keep = []
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        size = os.fstat(fd).st_size
        if mib:
            keep.append(bytearray(mib << 20))  # fresh, zeroed, touched, kept
        t = time.perf_counter_ns()
        os.pread(fd, min(size, 1 << 20), 0)
        d = (time.perf_counter_ns() - t) / 1e3
        os.close(fd)
        n = size // 4096 + 1
        by[1 if n == 1 else 4 if n <= 4 else 16 if n <= 16 else 64].append(d)
    for k in sorted(by):
        v = sorted(by[k])
        print(f"up to {k} pages: {len(v)} reads, median {round(v[len(v) // 2])} us, min {round(v[0])}, max {round(v[-1])}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "curve":
        curve(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "files":
        files(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
