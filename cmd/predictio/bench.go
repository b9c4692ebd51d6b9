package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/predictio/predictio/bench"
)

func init() {
	c := &command{
		name:    "bench",
		summary: "measure the I/O engine against psync, libaio and fio (bench engine), a device profile for simulate (bench device), or cold launches with the live runtime (bench launch)",
		usage: "predictio bench engine [--backend LIST] [--rw randread|randwrite|mix] [--qd LIST] [--threads LIST] [--duration D] [--size N] [--file F] [--cpus LIST] [--vs-fio] [--json]\n" +
			"       predictio bench device [--file F] [--duration 30s] [-o profile.json]\n" +
			"       predictio bench launch [--programs LIST] [--modes LIST] [--rounds 5] [--learn 3] [--warm] [--overhead] [--json F] [--plot F] [--markdown F]",
		example: "predictio bench engine --backend uring,libaio --qd 32 --threads 1 --duration 5s --vs-fio --reps 3\n" +
			"predictio bench device --duration 30s -o vda.json",
	}
	c.run = func(args []string) int {
		if len(args) == 0 {
			commandHelp(os.Stderr, c)
			return 2
		}
		switch args[0] {
		case "engine":
			return benchEngine(c, args[1:])
		case "device":
			return benchDevice(c, args[1:])
		case "launch":
			return benchLaunch(c, args[1:])
		case "-h", "-help", "--help":
			commandHelp(os.Stdout, c)
			return 0
		}
		return fail(2, fmt.Errorf("bench: unknown subcommand %q; want engine, device or launch", args[0]))
	}
	c.subcommands = []string{"engine", "device", "launch"}
	register(c)
}

func parseInts(flagName, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("bench engine: --%s %q: %q is not a number in %d..%d", flagName, s, f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseBenchSize reads 1073741824, 1G, 1GiB, 512M, 512MiB.
func parseBenchSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "IB"), "B")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		case 'T':
			mult, t = 1<<40, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 || v > (1<<50)/mult {
		return 0, fmt.Errorf("size %q is not a positive size like 1GiB or 512M", s)
	}
	return v * mult, nil
}

func benchEngine(c *command, args []string) int {
	fs := newFlagSet(c, "bench engine")
	backends := fs.String("backend", strings.Join(bench.AllBackends, ","), "comma-separated backends: "+strings.Join(bench.AllBackends, ", "))
	rw := fs.String("rw", "randread", "workload: randread, randwrite or mix (4 KiB reads and writes alternating)")
	qds := fs.String("qd", "1,8,32,64,128", "comma-separated queue depths (psync runs at 1 only)")
	threads := fs.String("threads", "1,2", "comma-separated thread counts (each thread has its own fd, context or ring)")
	dur := fs.Duration("duration", 5*time.Second, "measured time per point")
	sizeStr := fs.String("size", "1GiB", "working set (the scratch file's size), at least 1 GiB unless you know better")
	file := fs.String("file", "/var/tmp/predictio-bench.dat", "scratch file on the filesystem under test (created and filled if missing; must honour O_DIRECT)")
	fixed := fs.Bool("fixedbufs", true, "uring backends: registered (fixed) buffers")
	regFiles := fs.Bool("registerfiles", true, "uring backends: registered (fixed) files")
	harvest := fs.String("harvest", "auto", "uring backends: wait (block in io_uring_enter), backoff (poll the CQ: spin, PAUSE, sched_yield) or auto (wait for uring, backoff for the SQPOLL backends, as fio does)")
	deferTR := fs.Bool("defer-taskrun", true, "uring backend: COOP_TASKRUN|SINGLE_ISSUER|DEFER_TASKRUN, as fio 3.33 sets them")
	idle := fs.Duration("sq-thread-idle", time.Second, "SQPOLL idle window (sq_thread_idle)")
	raw := fs.Bool("raw-syscalls", true, "make blocking syscalls without the Go scheduler's hand-off (about 4 us less CPU per wait here); GOMAXPROCS is raised to threads+1")
	batch := fs.Bool("batch-submit", false, "libaio and uring: submit the requests freed by one harvest in one syscall instead of one syscall per request (fio's default iodepth_batch_submit=1)")
	cpus := fs.String("cpus", "", "pin worker thread i to the i-th CPU of this set (e.g. 1 or 0-1), ours and fio's alike (fio: cpus_allowed, cpus_allowed_policy=split); auto: the CPUs taking the device's completion interrupts first, one CPU per thread; empty: the scheduler places the threads, and at QD 1 the result then depends on whether each tool's thread lands on the completion-interrupt CPU (printed in the header)")
	vsFio := fs.Bool("vs-fio", false, "also run fio with the same job on the same file, interleaved, and print our/fio ratios")
	fioBin := fs.String("fio", "fio", "fio binary for --vs-fio")
	reps := fs.Int("reps", 1, "repetitions per point (A/B interleaved with fio under --vs-fio)")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	limit(fs, "duration", 10*time.Millisecond, 24*time.Hour)
	limit(fs, "sq-thread-idle", time.Millisecond, time.Hour)
	limit(fs, "reps", 1, 100)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, fmt.Errorf("bench engine: unexpected argument %q", fs.Arg(0)))
	}
	size, err := parseBenchSize(*sizeStr)
	if err != nil {
		return fail(2, fmt.Errorf("bench engine: --size: %w", err))
	}
	if size%(1<<20) != 0 {
		return fail(2, fmt.Errorf("bench engine: --size %s is not a multiple of 1 MiB", *sizeStr))
	}
	qdList, err := parseInts("qd", *qds, 1, 4096)
	if err != nil {
		return fail(2, err)
	}
	thList, err := parseInts("threads", *threads, 1, 256)
	if err != nil {
		return fail(2, err)
	}
	var cpuList []int
	if *cpus != "" && *cpus != "auto" {
		if cpuList, err = bench.ParseCPUList(*cpus); err != nil {
			return fail(2, fmt.Errorf("bench engine: --cpus: %w", err))
		}
	}
	var bl []string
	for _, b := range strings.Split(*backends, ",") {
		b = strings.TrimSpace(b)
		ok := false
		for _, k := range bench.AllBackends {
			ok = ok || b == k
		}
		if !ok {
			return fail(2, fmt.Errorf("bench engine: --backend: unknown backend %q; want some of %s", b, strings.Join(bench.AllBackends, ", ")))
		}
		bl = append(bl, b)
	}
	m := bench.Matrix{
		Template: bench.Point{Path: *file, Size: size, RW: *rw, Duration: *dur, FixedBufs: *fixed, RegisterFiles: *regFiles,
			Harvest: *harvest, DeferTaskrun: *deferTR, SQThreadIdle: *idle, RawSyscalls: *raw, BatchSubmit: *batch, CPUs: cpuList},
		Backends: bl, Threads: thList, QDs: qdList, Reps: *reps, Progress: os.Stderr, AutoCPUs: *cpus == "auto",
	}
	// Validate the template before filling a 1 GiB file.
	probe := m.Template
	probe.Backend, probe.Threads, probe.QD = bl[0], thList[0], qdList[0]
	if _, err := bench.FioArgs(probe); err != nil {
		return fail(2, fmt.Errorf("bench engine: %w", err))
	}
	if *vsFio {
		path, err := exec.LookPath(*fioBin)
		if err != nil {
			return fail(1, fmt.Errorf("bench engine: --vs-fio needs fio: %w; install it with 'apt-get install fio' or pass --fio PATH", err))
		}
		m.Fio = path
	}
	if err := bench.PrepareScratch(*file, size, os.Stderr); err != nil {
		return fail(1, fmt.Errorf("bench engine: %w", err))
	}
	rep, err := m.Run()
	if err != nil {
		if errors.Is(err, bench.ErrNoDirectIO) {
			return fail(1, err)
		}
		return fail(1, fmt.Errorf("bench engine: %w", err))
	}
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fail(1, err)
		}
		return 0
	}
	rep.WriteTable(os.Stdout)
	return 0
}

func benchDevice(c *command, args []string) int {
	fs := newFlagSet(c, "bench device")
	file := fs.String("file", "/var/tmp/predictio-device.dat", "scratch file on the device to profile (created and filled if missing)")
	sizeStr := fs.String("size", "1GiB", "scratch file size (at least 64 MiB)")
	dur := fs.Duration("duration", 30*time.Second, "total measuring time, split over the three measurements")
	name := fs.String("name", "", "profile name (default: the block device's name)")
	out := fs.String("o", "", "write the profile JSON to this file (default: stdout)")
	limit(fs, "duration", 300*time.Millisecond, 24*time.Hour)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, fmt.Errorf("bench device: unexpected argument %q", fs.Arg(0)))
	}
	size, err := parseBenchSize(*sizeStr)
	if err != nil {
		return fail(2, fmt.Errorf("bench device: --size: %w", err))
	}
	if size < 64<<20 || size%(1<<20) != 0 {
		return fail(2, fmt.Errorf("bench device: --size %s must be a multiple of 1 MiB and at least 64 MiB", *sizeStr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := bench.MeasureDevice(ctx, bench.DeviceConfig{Path: *file, Size: size, Duration: *dur, Name: *name, Log: os.Stderr})
	if err != nil {
		return fail(1, fmt.Errorf("bench device: %w", err))
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fail(1, err)
	}
	b = append(b, '\n')
	if cached, err := bench.SaveProfile(p, *file); err != nil {
		fmt.Fprintf(os.Stderr, "predictio: warning: %v\n", err)
	} else {
		fmt.Fprintf(os.Stderr, "cached in %s: simulate and replay predict with it for files on this device\n", cached)
	}
	if *out == "" {
		os.Stdout.Write(b)
		return 0
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return fail(1, fmt.Errorf("bench device: write profile: %w", err))
	}
	fmt.Fprintf(os.Stderr, "wrote %s; use it elsewhere with 'predictio simulate --device-profile %s BUNDLE'\n", *out, *out)
	return 0
}
