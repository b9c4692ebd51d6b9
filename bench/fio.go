package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// FioJob is the fio command line matching a Point, and which of our options
// it matched.
type FioJob struct {
	Args    []string
	Matched []string // e.g. "ioengine=io_uring", "fixedbufs=1"
	Notes   []string // what fio does differently
}

// FioArgs builds the fio job for p: same file, size, block size, rw, queue
// depth, threads (numjobs, --thread), O_DIRECT and runtime.
func FioArgs(p Point) (FioJob, error) {
	if err := p.validate(); err != nil {
		return FioJob{}, err
	}
	var j FioJob
	rw := map[string]string{"randread": "randread", "randwrite": "randwrite", "mix": "randrw"}[p.RW]
	secs := int(p.Duration.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	j.Args = []string{
		"--name=predictio", "--filename=" + p.Path, "--size=" + strconv.FormatInt(p.Size, 10),
		"--direct=1", "--bs=4k", "--rw=" + rw, "--numjobs=" + strconv.Itoa(p.Threads), "--thread",
		"--group_reporting", "--time_based", "--runtime=" + strconv.Itoa(secs), "--norandommap", "--randrepeat=0",
		"--lat_percentiles=1", "--output-format=json", "--invalidate=1",
	}
	j.Matched = append(j.Matched, "direct=1", "bs=4k", "rw="+rw, "numjobs="+strconv.Itoa(p.Threads)+" (threads)", "runtime="+strconv.Itoa(secs)+"s", "norandommap (uniform offsets, like ours)")
	if len(p.CPUs) > 0 {
		// split: job i runs on the i-th CPU of the set, as our thread i.
		list := formatCPUList(p.CPUs)
		j.Args = append(j.Args, "--cpus_allowed="+list, "--cpus_allowed_policy=split")
		j.Matched = append(j.Matched, "cpus_allowed="+list+" cpus_allowed_policy=split (thread i on the i-th CPU)")
	}
	if p.RW == "mix" {
		j.Args = append(j.Args, "--rwmixread=50")
		j.Notes = append(j.Notes, "fio's randrw picks read or write at random with rwmixread=50; ours strictly alternates")
	}
	switch p.Backend {
	case Psync:
		j.Args = append(j.Args, "--ioengine=psync")
		j.Matched = append(j.Matched, "ioengine=psync")
	case Libaio:
		j.Args = append(j.Args, "--ioengine=libaio", "--iodepth="+strconv.Itoa(p.QD))
		j.Matched = append(j.Matched, "ioengine=libaio", "iodepth="+strconv.Itoa(p.QD))
		if p.BatchSubmit {
			j.Notes = append(j.Notes, "ours submits freed slots in one io_submit (--batch-submit); fio one per request")
		} else {
			j.Matched = append(j.Matched, "iodepth_batch_submit=1 (one submit syscall per request)")
		}
	default:
		j.Args = append(j.Args, "--ioengine=io_uring", "--iodepth="+strconv.Itoa(p.QD),
			"--fixedbufs="+b01(p.FixedBufs), "--registerfiles="+b01(p.RegisterFiles))
		j.Matched = append(j.Matched, "ioengine=io_uring", "iodepth="+strconv.Itoa(p.QD), "fixedbufs="+b01(p.FixedBufs), "registerfiles="+b01(p.RegisterFiles))
		if p.Backend == Uring {
			if p.BatchSubmit {
				j.Notes = append(j.Notes, "ours submits freed slots in one io_uring_enter (--batch-submit); fio one per request")
			} else {
				j.Matched = append(j.Matched, "iodepth_batch_submit=1 (one io_uring_enter per request)")
			}
		}
		if p.Backend != Uring {
			j.Args = append(j.Args, "--sqthread_poll=1")
			j.Matched = append(j.Matched, "sqthread_poll=1")
			if !p.RegisterFiles {
				j.Notes = append(j.Notes, "fio forces registerfiles=1 with sqthread_poll")
			}
			if p.Harvest == harvestWait {
				j.Notes = append(j.Notes, "with sqthread_poll fio polls the CQ without syscalls; ours waits in io_uring_enter (--harvest backoff matches fio)")
			} else {
				j.Notes = append(j.Notes, "fio polls the CQ in a flat spin; ours spins, then PAUSEs, then sched_yields")
			}
			if p.SQThreadIdle > 0 && p.SQThreadIdle != time.Second {
				j.Notes = append(j.Notes, "fio uses the kernel's default sq_thread_idle (1 s)")
			}
		} else if p.Harvest == harvestSpin {
			j.Notes = append(j.Notes, "fio waits for completions in io_uring_enter; ours polls the CQ (--harvest wait matches fio)")
		} else if !p.DeferTaskrun {
			j.Notes = append(j.Notes, "fio 3.33 sets COOP_TASKRUN|SINGLE_ISSUER|DEFER_TASKRUN; ours does not (--defer-taskrun matches fio)")
		}
		if p.Backend == UringShared && p.Threads > 1 {
			j.Notes = append(j.Notes, "fio has no ATTACH_WQ: each fio job has its own SQPOLL thread")
		}
	}
	return j, nil
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// fioOutput is the part of fio's --output-format=json we read.
type fioOutput struct {
	FioVersion string `json:"fio version"`
	Jobs       []struct {
		Read  fioDir `json:"read"`
		Write fioDir `json:"write"`
	} `json:"jobs"`
}

type fioDir struct {
	IOPS     float64 `json:"iops"`
	TotalIOs uint64  `json:"total_ios"`
	Runtime  float64 `json:"runtime"` // ms
	LatNS    struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"lat_ns"`
	ClatNS struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

func (d *fioDir) pct(key string) float64 {
	if v, ok := d.LatNS.Percentile[key]; ok {
		return v
	}
	return d.ClatNS.Percentile[key]
}

// ParseFio reads fio's JSON output into a Result (IOPS and latency; with a
// mixed job, IOPS is reads plus writes and percentiles are the slower side's).
func ParseFio(out []byte, p Point) (Result, error) {
	// fio may print warnings before the JSON document.
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var fo fioOutput
	if err := json.Unmarshal(out, &fo); err != nil {
		return Result{}, fmt.Errorf("parse fio JSON output: %w", err)
	}
	if len(fo.Jobs) != 1 {
		return Result{}, fmt.Errorf("parse fio JSON output: %d job entries, want 1 (group_reporting)", len(fo.Jobs))
	}
	rd, wr := fo.Jobs[0].Read, fo.Jobs[0].Write
	r := Result{Tool: "fio", Backend: p.Backend, RW: p.RW, Threads: p.Threads, QD: p.QD, Syscalls: -1,
		FixedBufs: p.FixedBufs, RegFiles: p.RegisterFiles}
	r.IOPS = rd.IOPS + wr.IOPS
	r.Ops = rd.TotalIOs + wr.TotalIOs
	r.Seconds = max(rd.Runtime, wr.Runtime) / 1e3
	r.MiBs = r.IOPS * BlockSize / (1 << 20)
	for _, d := range []*fioDir{&rd, &wr} {
		if d.TotalIOs == 0 {
			continue
		}
		r.P50us = max(r.P50us, d.pct("50.000000")/1e3)
		r.P99us = max(r.P99us, d.pct("99.000000")/1e3)
		r.P999us = max(r.P999us, d.pct("99.900000")/1e3)
	}
	if r.Ops == 0 {
		return r, errors.New("parse fio JSON output: no I/O completed")
	}
	return r, nil
}

// runSampled runs cmd to completion while sampling where its threads run,
// and reports the workers threads that ran longest.
func runSampled(cmd *exec.Cmd, workers int) (placement, error) {
	if err := cmd.Start(); err != nil {
		return placement{}, err
	}
	// Sample until the child is a zombie: until we reap it, its PID (and
	// so /proc/PID) cannot be reused by another process.
	ps := startPlacement(cmd.Process.Pid)
	for !exited(cmd.Process.Pid) {
		time.Sleep(placementTick / 5)
	}
	pl := ps.finish(workers)
	return pl, cmd.Wait()
}

// exited says whether process pid (our child, not yet reaped) has exited.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// RunFio runs fio for p and measures its CPU time (getrusage
// RUSAGE_CHILDREN around the run, so fio's start-up is included).
func RunFio(fio string, p Point) (Result, FioJob, error) {
	if err := p.validate(); err != nil {
		return Result{}, FioJob{}, err
	}
	job, err := FioArgs(p)
	if err != nil {
		return Result{}, job, err
	}
	quiesce()
	cached, err := EnsureCold(p.Path, p.Size)
	if err != nil {
		return Result{}, job, err
	}
	irqCPUs := CompletionIRQCPUs(p.Path)
	var ru0, ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_CHILDREN, &ru0)
	cmd := exec.Command(fio, job.Args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// fio's job threads are the p.Threads threads that ran longest.
	pl, err := runSampled(cmd, p.Threads)
	if err != nil {
		return Result{}, job, fmt.Errorf("run %s %s: %w: %s", fio, strings.Join(job.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	unix.Getrusage(unix.RUSAGE_CHILDREN, &ru1)
	r, err := ParseFio(stdout.Bytes(), p)
	if err != nil {
		return r, job, err
	}
	r.CPUs = formatCPUList(p.CPUs)
	pl.fill(&r, irqCPUs)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	r.CPUus = float64(cpu.Microseconds()) / float64(r.Ops)
	r.CachedPages = cached
	return r, job, nil
}
