package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func init() {
	c := &command{
		name:    "simulate",
		summary: "score prefetch policies offline: replay a bundle through Linux readahead, the policies, a page cache and a device model",
		usage: "predictio simulate [--policy SPEC]... [--cache SIZE] [--cache-model lru|2q] [--device nvme|sata-ssd|hdd | --device-profile FILE | --measure-device]\n" +
			"                   [--no-readahead] [--model FILE] [--no-oracle] [--json] [--assert EXPR]... [--junit FILE]\n" +
			"                   [--sweep cache=SIZE,SIZE,...] [--plot FILE.svg|FILE.png] BUNDLE\n\n" +
			"Policies: " + strings.Join(policies.Names(), ", ") + " (spec name[:key=value,...]; 'predictio simulate --policy help' lists parameters).\n" +
			"Exit status: 0 ok, 1 an assertion failed or the simulation failed, 2 usage error.",
		example: "predictio trace synth -o /var/tmp/bt --pattern btree --events 20000\n" +
			"predictio simulate --policy tree --cache 64MiB --assert 'tree.coverage>=0.8' /var/tmp/bt",
	}
	c.run = func(args []string) int { return runSimulate(c, args, os.Stdout, os.Stderr) }
	register(c)
}

func runSimulate(c *command, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet(c, "simulate")
	fs.SetOutput(stderr)
	var specs, asserts stringList
	fs.Var(&specs, "policy", "policy spec to score, e.g. tree:window=8 (repeatable)")
	cacheFlag := fs.String("cache", "256MiB", "page cache capacity")
	cacheModel := fs.String("cache-model", "lru", "cache model: lru, or 2q (Linux-like active/inactive lists)")
	var dev deviceFlags
	dev.register(fs, "the device model")
	noRA := fs.Bool("no-readahead", false, "turn the Linux readahead baseline off in every lane")
	raSpec := fs.String("readahead", "readahead", "readahead baseline spec, e.g. readahead:kb=256")
	modelFile := fs.String("model", "", "markov model trained by 'predictio train markov'")
	oracleSpec := fs.String("oracle", "oracle", "oracle spec shown as the upper bound")
	noOracle := fs.Bool("no-oracle", false, "leave the oracle out (it holds every demand access in memory)")
	maxPages := fs.Uint("max-pages", 0, "maximum pages per normalized request (0: 256)")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	untraced := fs.Bool("untraced", false, "take the recorder's own cost, measured per row (format 1.2), out of the recorded think times: predict the program as it runs untraced (reads the bundle into memory)")
	fs.Var(&asserts, "assert", "CI gate LANE.METRIC OP NUMBER, e.g. 'tree.coverage>=0.8' (repeatable)")
	junit := fs.String("junit", "", "write a JUnit XML report to FILE")
	sweep := fs.String("sweep", "", "run several cache sizes in parallel: cache=64MiB,256MiB,1GiB")
	plotFile := fs.String("plot", "", "draw coverage and speedup against cache size into FILE.svg or FILE.png")
	limit[uint](fs, "max-pages", 1, 1<<20).orZero("256")
	noVerify := addNoVerifyFlag(fs, stderr)
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	noVerify()
	for _, s := range specs {
		if s == "help" || s == "list" {
			for _, n := range policies.Names() {
				fmt.Fprint(stdout, policies.Describe(n))
			}
			return 0
		}
	}
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "predictio simulate: %v\n", err)
		return 2
	}
	failErr := func(err error) int {
		fmt.Fprintf(stderr, "predictio simulate: %v\n", err)
		return 1
	}
	if len(pos) != 1 {
		return usageErr(errors.New("want exactly one BUNDLE argument; run 'predictio simulate -h' for usage"))
	}
	cfg := simulate.Config{NoReadahead: *noRA, ReadaheadSpec: *raSpec, Policies: specs, Oracle: !*noOracle, OracleSpec: *oracleSpec}
	var err error
	if cfg.CacheBytes, err = simulate.ParseSize(*cacheFlag); err != nil {
		return usageErr(fmt.Errorf("flag --cache: %w", err))
	}
	if cfg.CacheBytes < 4096 {
		return usageErr(fmt.Errorf("flag --cache: %s is less than one page", *cacheFlag))
	}
	if cfg.CacheModel, err = simulate.ParseCacheModel(*cacheModel); err != nil {
		return usageErr(fmt.Errorf("flag --cache-model: %w", err))
	}
	if dev.profile != "" && dev.preset != "" {
		return usageErr(errors.New("flags --device and --device-profile: use one"))
	}
	if dev.preset != "" {
		if _, err := simulate.Preset(dev.preset); err != nil {
			return usageErr(fmt.Errorf("flag --device: %w", err))
		}
	}
	if err := dev.checkFileRates(); err != nil {
		return usageErr(err)
	}
	var sizes []int64
	if *sweep != "" {
		if sizes, err = simulate.ParseSweep(*sweep); err != nil {
			return usageErr(fmt.Errorf("flag --sweep: %w", err))
		}
	}
	var checks []simulate.Assertion
	for _, a := range asserts {
		as, err := simulate.ParseAssertion(a)
		if err != nil {
			return usageErr(fmt.Errorf("flag --assert: %w", err))
		}
		checks = append(checks, as)
	}
	if *plotFile != "" {
		if ext := strings.ToLower(*plotFile); !strings.HasSuffix(ext, ".svg") && !strings.HasSuffix(ext, ".png") {
			return usageErr(fmt.Errorf("flag --plot: %q must end in .svg or .png", *plotFile))
		}
	}

	in, err := simulate.OpenInput(pos[0], simulate.DeferReferenceCheck())
	if err != nil {
		return failErr(err)
	}
	defer in.Close()
	cfg.PageSize = in.PageSize
	cfg.Env = in.Env()
	cfg.BlockFiles = in.BlockFiles()
	cfg.Env.MaxPages = uint32(*maxPages)
	cfg.Env.Warn = func(msg string) { fmt.Fprintf(stderr, "predictio simulate: warning: %s\n", msg) }
	if *modelFile != "" {
		m, err := loadModel(*modelFile)
		if err != nil {
			return failErr(err)
		}
		cfg.Env.Markov = m
	}
	// The device and readahead parameters of this machine, unless told
	// otherwise. The oracle's future is streamed by Run.
	paths := in.Paths()
	list := make([]string, 0, len(paths))
	for _, p := range paths {
		list = append(list, p)
	}
	choice, err := chooseDevice(dev, list, stderr)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return usageErr(err)
		}
		return failErr(err)
	}
	cfg.Device, cfg.Calibrated = choice.device, choice.calibrated
	rates, note, err := fileRates(dev, choice, in.Bundle, in.PageSize)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return usageErr(err)
		}
		return failErr(err)
	}
	cfg.FileRates = rates
	if note != "" {
		choice.notes = append(choice.notes, note)
	}
	if cfg.Device.Host != nil {
		cfg.Dirs = in.Dirs() // the host model's path lookups
		cfg.PerKind = true   // modelled times per kind, to set beside replay's
	}
	if dev.preset == "" {
		ra := simulate.ReadaheadOnThisMachine(paths, choice.path)
		cfg.Env.FileRA = ra.FileRA
		cfg.ReadaheadParams = ra.Summary
	}

	source := in.Source
	var untracedNS uint64
	if *untraced {
		evs, ns, err := in.UntracedEvents()
		if err != nil {
			if errors.Is(err, simulate.ErrNoTracerCost) {
				err = fmt.Errorf("--untraced: %w; simulate it without --untraced", err)
			}
			return failErr(err)
		}
		untracedNS = ns
		source = func() (simulate.Source, error) { return &simulate.SliceSource{Events: evs}, nil }
	}
	var reports []*simulate.Report
	if sizes == nil {
		src, err := source()
		if err != nil {
			return failErr(err)
		}
		r, err := simulate.Run(cfg, src)
		src.Close()
		if err != nil {
			return failErr(fmt.Errorf("simulate %s: %w", pos[0], err))
		}
		reports = []*simulate.Report{r}
	} else {
		// Each goroutine reads the bundle with its own cursors and streams
		// its own future; the file table and the model are shared
		// read-only.
		reports, err = simulate.Sweep(cfg, sizes, source, nil)
		if err != nil {
			return failErr(fmt.Errorf("simulate %s: %w", pos[0], err))
		}
	}
	for _, r := range reports {
		r.Notes = append(r.Notes, choice.notes...)
		if *untraced {
			r.Untraced, r.UntracedNS = true, untracedNS
			r.Notes = append(r.Notes, fmt.Sprintf("untraced: the recorder's own %.1f ms taken out of the recorded think times", float64(untracedNS)/1e6))
		}
	}

	// Results: table or JSON.
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		var v any = reports[0]
		if sizes != nil {
			v = sweepJSON(reports)
		}
		if err := enc.Encode(v); err != nil {
			return failErr(err)
		}
	} else if sizes == nil {
		simulate.WriteTable(stdout, reports[0])
	} else {
		for _, r := range reports {
			simulate.WriteTable(stdout, r)
			fmt.Fprintln(stdout)
		}
		fmt.Fprintln(stdout, "curve:")
		simulate.WriteCurve(stdout, reports)
	}
	if *plotFile != "" {
		if err := simulate.Plot(*plotFile, reports); err != nil {
			return failErr(err)
		}
	}

	// Gates.
	var results []simulate.Result
	failed := 0
	for _, r := range reports {
		rs := simulate.CheckAll(checks, r)
		for i := range rs {
			if len(reports) > 1 {
				rs[i].Expr = fmt.Sprintf("%s [cache %s]", rs[i].Expr, simulate.FormatSize(r.CacheBytes))
			}
			if !rs[i].OK {
				failed++
				fmt.Fprintf(stderr, "predictio simulate: assertion failed: %s\n", rs[i].Message())
			}
		}
		results = append(results, rs...)
	}
	if *junit != "" {
		if err := writeJUnit(*junit, pos[0], reports, results); err != nil {
			return failErr(err)
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// sweepJSON is the --json output of a sweep.
func sweepJSON(reports []*simulate.Report) any {
	var events uint64
	var elapsed int64
	for _, r := range reports {
		events += r.Events
		elapsed = max(elapsed, r.ElapsedNS)
	}
	eps := 0.0
	if elapsed > 0 {
		eps = float64(events) / (float64(elapsed) / 1e9)
	}
	return struct {
		Events       uint64             `json:"events"`
		EventsPerSec float64            `json:"events_per_sec"`
		Sweep        []*simulate.Report `json:"sweep"`
	}{events, eps, reports}
}

func writeJUnit(path, bundle string, reports []*simulate.Report, results []simulate.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write junit report: %w", err)
	}
	// One suite per cache size would need a wrapper; the policies of the
	// first report and every assertion are enough for CI displays.
	if err := simulate.WriteJUnit(f, "predictio simulate "+bundle, reports[0], results); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write junit report: %w", err)
	}
	return nil
}

func loadModel(path string) (*policies.MarkovModel, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	defer f.Close()
	m, err := policies.Load(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
