#!/usr/bin/env bash
# qd1-trace.sh splits each operation of a queue-depth-1 O_DIRECT random-read
# run into its phases with ftrace (perf record of syscall, block, IRQ and
# scheduler tracepoints, system-wide), for predictio's bench engine or for
# fio with the same job, so the two can be compared per operation, free of
# the device's service time (which drifts between runs when others use the
# disk). Needs root, perf, fio (for --tool fio) and python3; see
# docs/engine.md "Queue depth 1 against fio".
#
#   scripts/qd1-trace.sh --tool ours|fio --backend psync|libaio|uring \
#       [--cpu N] [--threads T] [--secs S] [--predictio BIN] [--file F]
#
# --cpu pins the worker thread(s) (ours: --cpus; fio: cpus_allowed with
# cpus_allowed_policy=split). Prints, for each worker thread: the CPUs it
# submitted on, where the completion interrupts ran, and per operation
# (microseconds, p10/p50/p90): overhead (cycle minus device time), cycle,
# submit syscall, device (block_rq_issue to block_rq_complete), completion
# to the waiting syscall's exit, the user-space gap, and reschedule IPIs
# per operation on the thread's CPU.
set -euo pipefail
tool=ours backend=libaio cpu="" threads=1 secs=2 bin=predictio file=/var/tmp/predictio-bench.dat
while [ $# -gt 0 ]; do
	case "$1" in
	--tool) tool=$2; shift 2 ;;
	--backend) backend=$2; shift 2 ;;
	--cpu) cpu=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--secs) secs=$2; shift 2 ;;
	--predictio) bin=$2; shift 2 ;;
	--file) file=$2; shift 2 ;;
	*) echo "qd1-trace: unknown argument $1; see the header of $0" >&2; exit 2 ;;
	esac
done
for t in perf python3; do
	command -v "$t" >/dev/null || { echo "qd1-trace: $t not found; run scripts/setup.sh" >&2; exit 1; }
done
case $backend in
psync) fe="--ioengine=psync" ;;
libaio) fe="--ioengine=libaio --iodepth=1" ;;
uring) fe="--ioengine=io_uring --iodepth=1 --fixedbufs=1 --registerfiles=1" ;;
*) echo "qd1-trace: --backend $backend: want psync, libaio or uring" >&2; exit 2 ;;
esac
out=$(mktemp -d /var/tmp/qd1-trace.XXXXXX)
trap 'rm -rf "$out"' EXIT
if [ "$tool" = fio ]; then
	pin=""
	[ -n "$cpu" ] && pin="--cpus_allowed=$cpu --cpus_allowed_policy=split"
	# shellcheck disable=SC2086
	cmd=(fio --name=predictio --filename="$file" --size=1073741824 --direct=1 --bs=4k --rw=randread
		--numjobs="$threads" --thread --time_based --runtime="$secs" --norandommap --randrepeat=0
		--invalidate=1 --output-format=terse $fe $pin)
	comm=fio
else
	pin=()
	[ -n "$cpu" ] && pin=(--cpus "$cpu")
	cmd=("$bin" bench engine --backend "$backend" --qd 1 --threads "$threads" --duration "${secs}s" "${pin[@]}")
	comm=$(basename "$bin" | cut -c1-15)
fi
perf record -q -a -o "$out/perf.data" \
	-e raw_syscalls:sys_enter,raw_syscalls:sys_exit,block:block_rq_issue,block:block_rq_complete \
	-e sched:sched_wakeup,sched:sched_switch,irq_vectors:reschedule_entry \
	-- sleep $((secs + 2)) 2>/dev/null &
sleep 0.5
"${cmd[@]}" >/dev/null 2>&1
wait
perf script -i "$out/perf.data" -F comm,tid,cpu,time,event,trace 2>/dev/null >"$out/script.txt"
python3 - "$out/script.txt" "$comm" "$threads" <<'PY'
import re, statistics as st, sys
path, comm, nthreads = sys.argv[1], sys.argv[2], int(sys.argv[3])
IO = {17, 208, 209, 426}  # pread64, io_getevents, io_submit, io_uring_enter
rx = re.compile(r'\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)')
ev_all, cnt, ipis = [], {}, {}
for line in open(path):
    m = rx.match(line)
    if not m:
        continue
    c, tid, cpu, t, ev, rest = m.groups()
    tid, cpu, t, ev = int(tid), int(cpu), float(t) * 1e6, ev.split(':')[-1]
    nr, args = None, []
    if ev in ('sys_enter', 'sys_exit'):
        mm = re.search(r'NR (-?\d+)', rest)
        nr = int(mm.group(1)) if mm else None
        if ev == 'sys_enter':
            a = re.search(r'\(([^)]*)\)', rest)
            args = [int(x, 16) for x in a.group(1).split(', ')] if a else []
            if nr in IO and c == comm:
                cnt[tid] = cnt.get(tid, 0) + 1
    if ev == 'reschedule_entry':
        ipis[cpu] = ipis.get(cpu, 0) + 1
    ev_all.append((t, c, tid, cpu, ev, rest, nr, args))

def is_submit(nr, a): return nr in (17, 209) or (nr == 426 and len(a) > 1 and a[1] > 0)
def is_wait(nr, a): return nr in (17, 208) or (nr == 426 and len(a) > 2 and a[2] > 0)

def fmt(x):
    if not x:
        return "-"
    x = sorted(x)
    return "n=%6d p10 %5.1f p50 %5.1f p90 %6.1f" % (len(x), x[len(x) // 10], x[len(x) // 2], x[int(len(x) * .9)])

for wt in sorted(cnt, key=cnt.get, reverse=True)[:nthreads]:
    names = ("overhead (cycle - device)", "cycle", "submit syscall", "device", "complete -> wait exit", "user gap")
    ph = {k: [] for k in names}
    sub_cpus, irq_cpus = {}, {}
    op, last_exit, cur = None, None, None
    for t, c, tid, cpu, ev, rest, nr, args in ev_all:
        if op is not None:
            if ev == 'block_rq_issue' and 'issue' not in op and re.search(r' RS? 4096 ', rest) and (nthreads == 1 or tid == wt):
                op['issue'], op['sector'] = t, re.search(r'\(\) (\d+) \+', rest).group(1)
            elif ev == 'block_rq_complete' and 'issue' in op and 'comp' not in op and ('() %s +' % op['sector']) in rest:
                op['comp'] = t
                irq_cpus[cpu] = irq_cpus.get(cpu, 0) + 1
        if tid != wt:
            continue
        if ev == 'sys_enter':
            cur = (nr, args, t)
            if is_submit(nr, args):
                if op is not None and 'done' in op:
                    ph["cycle"].append(t - op['start'])
                    ph["overhead (cycle - device)"].append(t - op['start'] - (op['comp'] - op['issue']))
                if last_exit is not None:
                    ph["user gap"].append(t - last_exit)
                op = {'start': t}
                sub_cpus[cpu] = sub_cpus.get(cpu, 0) + 1
        elif ev == 'sys_exit' and cur is not None and op is not None:
            enr, eargs, et = cur
            if is_submit(enr, eargs) and 'subexit' not in op:
                op['subexit'] = t
                ph["submit syscall"].append(t - et)
            if is_wait(enr, eargs) and 'comp' in op and 'done' not in op:
                m = re.search(r'= (-?\d+)', rest)
                if m and (int(m.group(1)) > 0 or enr in (17, 426)):
                    op['done'] = last_exit = t
                    ph["device"].append(op['comp'] - op['issue'])
                    ph["complete -> wait exit"].append(t - op['comp'])
    ops = max(len(ph["cycle"]), 1)
    home = max(sub_cpus, key=sub_cpus.get) if sub_cpus else 0
    print("%s thread %d: submitted on CPUs %s, completions on CPUs %s, reschedule IPIs on CPU %d: %.2f/op (all threads)" % (
        comm, wt, dict(sorted(sub_cpus.items())), dict(sorted(irq_cpus.items())), home, ipis.get(home, 0) / ops))
    for k in names:
        print("  %-26s %s" % (k, fmt(ph[k])))
PY
