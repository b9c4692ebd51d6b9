#!/usr/bin/env python3
"""schedstat.py CMD [ARGS...]: runs CMD (stdout to /dev/null) and prints,
to stderr, its wall time and, from /proc/PID/schedstat sampled every 3 ms
until it exits, its CPU time, the time it waited on a run queue for a CPU
(run_delay) and its time slices. The last sample before the exit counts,
so up to 3 ms of the end is missed. Wrap it in predictio record to see
what the recorder's threads beside a program cost it in run-queue waits:

  sudo scripts/schedstat.py grep -r -c x /usr/include
  sudo predictio record -o /tmp/g.bundle -- scripts/schedstat.py grep -r -c x /usr/include
"""
import os
import sys
import time

if len(sys.argv) < 2:
    sys.exit(__doc__)
pid = os.posix_spawnp(sys.argv[1], sys.argv[1:], os.environ,
                      file_actions=[(os.POSIX_SPAWN_OPEN, 1, '/dev/null', os.O_WRONLY, 0)])
last = None
t0 = time.monotonic()
while True:
    try:
        with open(f'/proc/{pid}/schedstat') as f:
            v = f.read().split()
            if v:
                last = v
    except OSError:
        pass
    if os.waitpid(pid, os.WNOHANG)[0] == pid:
        break
    time.sleep(0.003)
wall = time.monotonic() - t0
if last is None:
    sys.exit(f"schedstat: no sample of {sys.argv[1]} (it exited within 3 ms)")
print(f"wall {wall:.3f} s cpu {int(last[0])/1e9:.3f} s run_delay {int(last[1])/1e9:.3f} s slices {last[2]}", file=sys.stderr)
