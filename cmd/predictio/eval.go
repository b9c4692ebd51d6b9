package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/predictio/predictio/eval"
	"github.com/predictio/predictio/internal/harness"
)

func init() {
	c := &command{
		name:    "eval",
		summary: "run the PredictIO paper's evaluation: real workloads cold, alternated over rounds, on this or an emulated device, into a report with plots",
		usage: "predictio eval [--suite NAME|all]... [--policy SPEC]... [--device this|sata-ssd|hdd] [--rounds N] [--quick] -o DIR\n" +
			"       predictio eval --list [--quick] [--device PRESET] [--rounds N]",
		example: "predictio eval --list\n" +
			"predictio eval --suite readahead,control --quick -o /var/tmp/eval-quick\n" +
			"predictio eval --suite all --device sata-ssd -o /var/tmp/eval-sata",
	}
	c.run = func(args []string) int { return runEval(c, args) }
	register(c)
}

func runEval(c *command, args []string) int {
	fs := newFlagSet(c, c.name)
	var suites, pols multiFlag
	fs.Var(&suites, "suite", "suite `NAME` to run, or all (repeatable, comma-separated; default all; see --list)")
	fs.Var(&pols, "policy", "policy `SPEC` to measure beside each suite's own modes (repeatable), e.g. stride:lookahead=8")
	device := fs.String("device", "this", "device preset: this (unthrottled), sata-ssd or hdd (cgroup read throttling)")
	rounds := fs.Int("rounds", 0, "rounds per mode; 0: 5, or 2 with --quick")
	quick := fs.Bool("quick", false, "run the reduced suites (CI): small workloads, fewer points")
	list := fs.Bool("list", false, "list the suites, what they measure and need, and their expected time, and exit")
	out := fs.String("o", "", "output `DIR`: results.json, report.md, report.html, plots/ (a rerun resumes it)")
	work := fs.String("workdir", eval.DefaultWorkDir, "`DIR` for the workloads (databases, data files) on the disk to measure; kept between runs")
	evictOnly := fs.Bool("evict-only", false, "evict only the workloads' own files before each run instead of also writing drop_caches")
	noCheck := fs.Bool("no-device-check", false, "do not measure the device preset with bench device before the suites")
	bin := fs.String("predictio", "", "predictio `BINARY` whose run command the suites use (default: this one)")
	limit(fs, "rounds", 1, 1000).orZero("the default")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, fmt.Errorf("eval: unexpected argument %q", fs.Arg(0)))
	}
	preset, err := harness.PresetByName(*device)
	if err != nil {
		return fail(2, fmt.Errorf("eval: --device: %w", err))
	}
	if *list {
		eval.List(os.Stdout, *quick, preset, *rounds)
		return 0
	}
	if *out == "" {
		return fail(2, errors.New("eval: no output directory; give -o DIR"))
	}
	if _, err := eval.Select(suites); err != nil {
		return fail(2, fmt.Errorf("eval: --suite: %w", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := eval.Run(ctx, eval.Options{Suites: suites, Policies: pols, Device: *device, Rounds: *rounds, Quick: *quick,
		Out: *out, WorkDir: *work, EvictOnly: *evictOnly, NoDeviceCheck: *noCheck, Predictio: *bin, Progress: os.Stderr})
	if res != nil {
		fmt.Printf("eval: wrote %s/report.md, report.html, results.json and plots/\n", *out)
		for _, s := range res.Suites {
			fmt.Printf("  %-10s %s", s.Name, s.Status)
			if s.Reason != "" {
				fmt.Printf(": %s", s.Reason)
			}
			fmt.Println()
		}
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "predictio: eval: interrupted; rerun the same command to resume")
			return 1
		}
		return fail(1, fmt.Errorf("eval: %w", err))
	}
	return 0
}
