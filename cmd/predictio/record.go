package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/record"
)

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// sizeFlag parses byte counts with an optional K, M or G suffix (powers of 1024).
type sizeFlag uint64

func (s *sizeFlag) String() string { return strconv.FormatUint(uint64(*s), 10) }
func (s *sizeFlag) Get() any       { return uint64(*s) }
func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func parseSize(v string) (uint64, error) {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(v, "K"), strings.HasSuffix(v, "k"):
		mult, v = 1<<10, v[:len(v)-1]
	case strings.HasSuffix(v, "M"):
		mult, v = 1<<20, v[:len(v)-1]
	case strings.HasSuffix(v, "G"):
		mult, v = 1<<30, v[:len(v)-1]
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return 0, fmt.Errorf("want a byte count like 4096, 64K or 16M")
	}
	return n * mult, nil
}

// pidMaxLimit is the kernel's PID_MAX_LIMIT on 64-bit: no process id is larger.
const pidMaxLimit = 1 << 22

func init() {
	c := &command{
		name:    "record",
		summary: "record the page-level file accesses of a command, processes or the system (eBPF) into a trace bundle",
		usage:   "predictio record -o BUNDLE [flags] -- COMMAND [ARGS]\n       predictio record -o BUNDLE [flags] (--pid P ... | --cgroup PATH | --all)",
		example: "sudo predictio record -o /tmp/cat.bundle -- cat /etc/os-release\n" +
			"sudo predictio record -o db.bundle --hints unix:/run/predictio.sock --include /var/lib/db -- ./db-bench",
	}
	c.run = func(args []string) int {
		fs := newFlagSet(c, c.name)
		out := fs.String("o", "", "bundle `directory` to write (must not exist or be empty)")
		var pids, include, exclude, comm, hintUIDs multiFlag
		fs.Var(&pids, "pid", "record process `P` and the children it forks from now on (repeatable)")
		cg := fs.String("cgroup", "", "record every process in the cgroup v2 `directory` and below")
		all := fs.Bool("all", false, "record the whole system (except the recorder)")
		dur := fs.Duration("duration", 0, "stop after this `duration` (e.g. 30s); default: until the target ends or Ctrl-C")
		limit(fs, "duration", time.Millisecond, 8760*time.Hour).orZero("until the target ends")
		fs.Var(&include, "include", "record only files under this path `prefix` (repeatable)")
		fs.Var(&exclude, "exclude", "never record files under this path `prefix` (repeatable; /proc, /sys and /dev always)")
		fs.Var(&comm, "comm", "record only tasks with this command `name` (repeatable)")
		var minSize, ring sizeFlag
		fs.Var(&minSize, "min-size", "record only files of at least this many `bytes` (K, M, G suffixes)")
		fs.Var(&ring, "ring-size", "events ring buffer `bytes`, a power of two (default 16M)")
		limit[uint64](fs, "min-size", 0, 1<<60)
		limit[uint64](fs, "ring-size", 4096, 1<<30).powerOfTwo().orZero("16M")
		hintsAddr := fs.String("hints", "", "receive application hints on `unix:PATH` (a Unix datagram socket; see docs/hints.md)")
		fs.Var(&hintUIDs, "hints-uid", "also accept hints from this `uid` (repeatable; the recorder's uid and root always)")
		adaptersFlag := fs.String("adapters", "all", "structure adapters whose derived events go into the hints table: none, all, or a list of sqlite, lmdb, gguf")
		quiet := fs.Bool("quiet", false, "no progress line and no summary")
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		cfg := record.Config{
			Output: *out, Command: fs.Args(), Cgroup: *cg, All: *all, Duration: *dur,
			Include: include, Exclude: exclude, Comm: comm, MinSize: uint64(minSize), RingBytes: int(ring),
			ToolVersion: version,
		}
		as, err := adapters.ParseList(*adaptersFlag)
		if err != nil {
			return fail(2, fmt.Errorf("record: --adapters: %w", err))
		}
		cfg.Adapters = as
		for _, p := range pids {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > pidMaxLimit {
				return fail(2, fmt.Errorf("parse --pid %q: not a process id (want 1 to %d)", p, pidMaxLimit))
			}
			cfg.PIDs = append(cfg.PIDs, n)
		}
		for _, u := range hintUIDs {
			n, err := strconv.ParseUint(u, 10, 32)
			if err != nil || n == math.MaxUint32 {
				return fail(2, fmt.Errorf("parse --hints-uid %q: not a uid (want 0 to %d)", u, uint32(math.MaxUint32-1)))
			}
			cfg.HintUIDs = append(cfg.HintUIDs, uint32(n))
		}
		if *hintsAddr != "" {
			p, ok := strings.CutPrefix(*hintsAddr, "unix:")
			if !ok || p == "" {
				return fail(2, fmt.Errorf("parse --hints %q: want unix:/path/to.sock", *hintsAddr))
			}
			cfg.HintSocket = p
		}
		if !*quiet {
			cfg.Progress = os.Stderr
		}
		if *out == "" {
			fs.Usage()
			return fail(2, errors.New("record: -o BUNDLE is required"))
		}

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		force := make(chan struct{})
		cfg.Force = force
		sigs := make(chan os.Signal, 3)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		go func() {
			n := 0
			for range sigs {
				n++
				switch n {
				case 1:
					fmt.Fprintln(os.Stderr, "\npredictio record: stopping and finalizing the bundle (press Ctrl-C again to finalize at once with what was written)")
					cancel()
				case 2:
					fmt.Fprintln(os.Stderr, "predictio record: finalizing now; events not yet written are discarded")
					close(force)
				default:
					os.Exit(130)
				}
			}
		}()
		sum, err := record.Run(ctx, cfg)
		if err != nil {
			return fail(1, err)
		}
		if !*quiet {
			fmt.Fprint(os.Stderr, sum.String())
		}
		if sum.ExitCode > 0 {
			return sum.ExitCode
		}
		return 0
	}
	register(c)
}
