package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/replay"
	"github.com/predictio/predictio/simulate"
)

func init() {
	c := &command{
		name:    "replay",
		summary: "replay a bundle on a real device, with and without a prefetch policy (A/B), or materialize its files",
		usage:   "predictio replay [flags] BUNDLE\n       predictio replay materialize BUNDLE DIR",
		example: "predictio trace synth -o /var/tmp/sparse.bundle --pattern sparse --events 20000 --file-pages 65536\n" +
			"predictio replay materialize /var/tmp/sparse.bundle /var/tmp/sparse.files\n" +
			"predictio replay --root /var/tmp/sparse.files --timing asap --ab baseline,oracle --repeat 3 /var/tmp/sparse.bundle\n" +
			"predictio replay --root /var/tmp/sparse.files --backend direct --cache 16384 --ab baseline,oracle --repeat 3 --json /var/tmp/sparse.bundle",
	}
	c.run = func(args []string) int { return runReplay(c, args) }
	c.subcommands = []string{"materialize"}
	register(c)
}

func runReplay(c *command, args []string) int {
	if len(args) > 0 && args[0] == "materialize" {
		return runMaterialize(c, args[1:])
	}
	fs := newFlagSet(c, "replay")
	var (
		opt           replay.Options
		runs          string
		policy        string
		cache         string
		model         string
		jsonOut       bool
		plotFile      string
		profile       string
		device        string
		noPredict     bool
		measure       bool
		fileRatesFlag string
		progress      string
	)
	fs.StringVar(&opt.Root, "root", "", "replay the files under `DIR` (as written by 'replay materialize') instead of at their recorded paths")
	fs.BoolVar(&opt.AllowChanged, "allow-changed", false, "replay files whose size or mtime differ from the recording (they must still be long enough)")
	fs.StringVar(&opt.Backend, "backend", "kernel", "who executes prefetch requests: kernel (page cache, io_uring FADVISE), kmod (page cache, the predictio kernel module; docs/kmod.md), direct (O_DIRECT engine, user-space cache) or none")
	fs.StringVar(&opt.Timing, "timing", "recorded", "recorded (keep each thread's think time) or asap")
	fs.BoolVar(&opt.Untraced, "untraced", false, "take the recorder's own cost, measured per row (format 1.2), out of the recorded think times: replay the program as it runs untraced")
	fs.Float64Var(&opt.Speed, "speed", 1, "divide recorded think times by `X`")
	fs.StringVar(&runs, "ab", "", "run specs to alternate, e.g. baseline,oracle or baseline,markov (baseline = no policy)")
	fs.StringVar(&policy, "policy", "", "one policy `SPEC` to replay with, without a baseline (see 'predictio simulate -h' for policies)")
	fs.IntVar(&opt.Repeat, "repeat", 1, "rounds of the run specs (A B A B ...)")
	fs.StringVar(&model, "model", "", "trained markov model `FILE` ('predictio train markov')")
	fs.BoolVar(&opt.Warm, "warm", false, "do not evict the files before each run: runs are warm and reported warm (kernel, none)")
	fs.BoolVar(&opt.DropCaches, "drop-caches", false, "also write /proc/sys/vm/drop_caches before each cold run (root)")
	fs.Float64Var(&opt.MaxResidue, "max-residue", replay.DefaultMaxResidue, "refuse a cold run when more than this `SHARE` (0..1] of the demanded pages stays cached after eviction (mapped or locked by other processes, dirty); every run starts with the first run's residue")
	fs.StringVar(&opt.Effect, "effect", replay.EffectSeparate, "kernel and kmod backends: count each prefetched page by its effect (used in time, late, wasted) with the eBPF effect observer, whose hooks slow a run: separate (in one more run of each policy, left out of the timing), inline (in the timed runs) or off")
	fs.BoolVar(&opt.WarmMetadata, "warm-metadata", false, "do not drop dentries and inodes (drop_caches 2) before cold runs of bundles with metadata rows")
	fs.IntVar(&opt.InFlight, "inflight", 8192, "kernel backend: most pages queued or being read ahead; excess requests are dropped")
	fs.BoolVar(&opt.Readahead, "readahead", false, "kernel backend: use readahead(2) instead of io_uring FADVISE(WILLNEED)")
	fs.StringVar(&cache, "cache", "65536", "direct backend: user-space cache size, in pages or with a unit (256MiB)")
	fs.IntVar(&opt.QueueDepth, "qd", 64, "direct backend: queue depth of each engine worker")
	fs.BoolVar(&opt.SQPoll, "sqpoll", false, "direct backend: engine rings share one SQPOLL thread (root before Linux 5.11)")
	fs.BoolVar(&jsonOut, "json", false, "write the report as JSON")
	fs.StringVar(&plotFile, "plot", "", "draw the latency CDF of each run spec into `FILE` (.png, .svg, .pdf)")
	fs.StringVar(&profile, "device-profile", "", "device profile `FILE` ('predictio bench device') for the predicted speedup")
	fs.StringVar(&device, "device", "", "device preset for the predicted speedup ("+strings.Join(simulate.PresetNames(), ", ")+"); default: the cached profile of this machine's device holding the files")
	fs.BoolVar(&measure, "measure-device", false, "when that device has no cached profile, measure one now ('bench device', about 30 s) and cache it")
	fs.StringVar(&fileRatesFlag, "file-rates", fileRatesAuto, "for the predicted speedup: "+fileRatesUsage)
	fs.BoolVar(&noPredict, "no-predict", false, "do not compute simulate's predicted speedup")
	fs.StringVar(&progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always or never")
	limit(fs, "speed", 0.001, 1e6)
	limit(fs, "repeat", 1, 10000)
	limit(fs, "inflight", 1, 1<<24)
	limit(fs, "qd", 1, 4096)
	limit(fs, "max-residue", 1e-9, 1.0)
	noVerify := addNoVerifyFlag(fs, os.Stderr)
	if code, ok := parseInterspersed(fs, args); !ok {
		return code
	}
	noVerify()
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	bundle := fs.Arg(0)
	switch {
	case runs != "" && policy != "":
		return fail(2, errors.New("replay: use either --ab or --policy"))
	case runs != "":
		opt.Runs = replay.SplitRuns(runs)
	case policy != "":
		opt.Runs = []string{policy}
	}
	n, err := parsePages(cache)
	if err != nil {
		return fail(2, err)
	}
	opt.CachePages = n
	if model != "" {
		f, err := os.Open(model)
		if err != nil {
			return fail(1, fmt.Errorf("replay: open model: %w", err))
		}
		m, err := policies.Load(f)
		f.Close()
		if err != nil {
			return fail(1, fmt.Errorf("replay: %s: %w", model, err)) // "load markov model: ..."
		}
		opt.Markov = m
	}
	switch progress {
	case "always":
		opt.Progress = os.Stderr
	case "auto":
		if _, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS); err == nil {
			opt.Progress = os.Stderr
		}
	case "never":
	default:
		return fail(2, fmt.Errorf("replay: --progress %q: use auto, always or never", progress))
	}
	if profile != "" && device != "" {
		return fail(2, errors.New("replay: flags --device and --device-profile: use one"))
	}
	if device != "" {
		if _, err := simulate.Preset(device); err != nil {
			return fail(2, fmt.Errorf("replay: flag --device: %w", err))
		}
	}
	devFlags := deviceFlags{profile: profile, preset: device, measure: measure, fileRates: fileRatesFlag}
	if err := devFlags.checkFileRates(); err != nil {
		return fail(2, fmt.Errorf("replay: %w", err))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := replay.New(bundle, opt)
	if err != nil {
		return fail(1, err)
	}
	rep, err := r.Replay(ctx)
	if err != nil {
		return fail(1, err)
	}
	if !noPredict {
		if err := predictReplay(r, rep, devFlags, bundle); err != nil {
			fmt.Fprintf(os.Stderr, "predictio: warning: %v\n", err)
		}
	}
	if jsonOut {
		err = rep.WriteJSON(os.Stdout)
	} else {
		err = rep.WriteText(os.Stdout)
	}
	if err != nil {
		return fail(1, err)
	}
	if plotFile != "" {
		if err := rep.WritePlot(plotFile); err != nil {
			return fail(1, err)
		}
		if !jsonOut {
			fmt.Printf("latency CDF written to %s\n", plotFile)
		}
	}
	return 0
}

func runMaterialize(c *command, args []string) int {
	fs := newFlagSet(c, "replay materialize")
	noVerify := addNoVerifyFlag(fs, os.Stderr)
	if code, ok := parseInterspersed(fs, args); !ok {
		return code
	}
	noVerify()
	if fs.NArg() != 2 {
		fs.Usage()
		return 2
	}
	res, err := replay.Materialize(fs.Arg(0), fs.Arg(1))
	if err != nil {
		return fail(1, err)
	}
	fmt.Printf("materialized %d files under %s: %d written (%.1f MiB), %d already there\n", res.Files, fs.Arg(1), res.Written, float64(res.Bytes)/(1<<20), res.Kept)
	fmt.Printf("replay them with: predictio replay --root %s %s\n", fs.Arg(1), fs.Arg(0))
	return 0
}

// parseInterspersed parses flags that may come before or after the
// positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) (int, bool) {
	var pos []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return code, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if err := fs.Parse(append([]string{"--"}, pos...)); err != nil {
		return 2, false
	}
	return 0, true
}

// parsePages parses a page count, or a size with a unit (KiB, MiB, GiB).
func parsePages(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("replay: --cache %q must be positive", s)
		}
		return n, nil
	}
	b, err := simulate.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("replay: --cache %q: want pages (65536) or a size (256MiB): %w", s, err)
	}
	n := int(b / int64(formats.PageSize()))
	if n <= 0 {
		return 0, fmt.Errorf("replay: --cache %q is smaller than a page", s)
	}
	return n, nil
}
