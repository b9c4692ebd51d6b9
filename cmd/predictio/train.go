package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/predictio/predictio/simulate"
	"github.com/predictio/predictio/train"
)

func init() {
	c := &command{
		name:    "train",
		summary: "train history policies from recorded bundles (markov: per-file first-order Markov models)",
		usage: "predictio train markov -o MODEL [--holdout K [--policy SPEC] [--cache SIZE] [--device NAME]] [--json] BUNDLE...\n\n" +
			"Bundles are training runs, oldest first; files are matched across runs by path, size and mtime.\n" +
			"With --holdout K the last K bundles are left out of training and simulated with the model.\n" +
			"Exit status: 0 ok, 1 training or evaluation failed, 2 usage error.",
		example: "for r in 0 1 2 3; do predictio trace synth -o /var/tmp/launch$r --pattern sparse --run $r; done\n" +
			"predictio train markov -o /var/tmp/launch.model --holdout 1 /var/tmp/launch0 /var/tmp/launch1 /var/tmp/launch2 /var/tmp/launch3\n" +
			"predictio simulate --model /var/tmp/launch.model --policy markov /var/tmp/launch3",
	}
	c.run = func(args []string) int { return runTrain(c, args, os.Stdout, os.Stderr) }
	c.subcommands = []string{"markov"}
	register(c)
}

func runTrain(c *command, args []string, stdout, stderr io.Writer) int {
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "predictio train: %v\n", err)
		return 2
	}
	failErr := func(err error) int {
		fmt.Fprintf(stderr, "predictio train: %v\n", err)
		return 1
	}
	if len(args) == 0 {
		commandHelp(stderr, c)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		commandHelp(stdout, c)
		return 0
	case "markov":
	default:
		return usageErr(fmt.Errorf("unknown model kind %q; the only kind is markov (predictio train markov -o MODEL BUNDLE)", args[0]))
	}
	fs := newFlagSet(c, "train markov")
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the model to this file")
	holdout := fs.Int("holdout", 0, "leave the last K bundles out of training and report simulate metrics on them")
	spec := fs.String("policy", "markov", "markov policy spec for --holdout, e.g. markov:depth=8")
	cacheFlag := fs.String("cache", "256MiB", "page cache capacity for --holdout")
	device := fs.String("device", "nvme", "device preset for --holdout: nvme, sata-ssd or hdd")
	noOracle := fs.Bool("no-oracle", false, "leave the oracle out of the --holdout report")
	jsonOut := fs.Bool("json", false, "print the training summary (and holdout reports) as JSON")
	limit(fs, "holdout", 1, 1<<16).orZero("no holdout")
	noVerify := addNoVerifyFlag(fs, stderr)
	pos, code, ok := parseArgs(fs, args[1:])
	if !ok {
		return code
	}
	noVerify()
	if *out == "" {
		return usageErr(errors.New("-o MODEL is required"))
	}
	if len(pos) == 0 {
		return usageErr(errors.New("want at least one BUNDLE"))
	}
	if *holdout < 0 || (*holdout > 0 && *holdout >= len(pos)) {
		return usageErr(fmt.Errorf("flag --holdout %d: want between 1 and %d with %d bundles", *holdout, len(pos)-1, len(pos)))
	}
	cfg := simulate.Config{Oracle: !*noOracle}
	var err error
	if cfg.CacheBytes, err = simulate.ParseSize(*cacheFlag); err != nil {
		return usageErr(fmt.Errorf("flag --cache: %w", err))
	}
	if cfg.CacheBytes < 4096 {
		return usageErr(fmt.Errorf("flag --cache: %s is less than one page", *cacheFlag))
	}
	if cfg.Device, err = simulate.Preset(*device); err != nil {
		return usageErr(fmt.Errorf("flag --device: %w", err))
	}
	warn := func(msg string) { fmt.Fprintf(stderr, "predictio train: warning: %s\n", msg) }

	start := time.Now()
	var res *train.Result
	var hr *train.HoldoutResult
	if *holdout > 0 {
		hr, err = train.Holdout(pos, *holdout, *spec, cfg, warn)
		if hr != nil {
			res = hr.Train
		}
	} else {
		res, err = train.Markov(pos)
	}
	if err != nil {
		return failErr(err)
	}
	for _, w := range res.Warnings {
		warn(w)
	}
	if err := saveModel(*out, res); err != nil {
		return failErr(err)
	}
	elapsed := time.Since(start)
	sum := res.Summary()
	if *jsonOut {
		v := struct {
			Model     string             `json:"model"`
			ElapsedNS int64              `json:"elapsed_ns"`
			Runs      []train.Run        `json:"runs"`
			Files     int                `json:"files"`
			States    int                `json:"states"`
			Warnings  []string           `json:"warnings"`
			Holdout   []string           `json:"holdout,omitempty"`
			Reports   []*simulate.Report `json:"holdout_reports,omitempty"`
		}{Model: *out, ElapsedNS: int64(elapsed), Runs: sum.Runs, Files: sum.Files, States: sum.States, Warnings: res.Warnings}
		if hr != nil {
			v.Holdout, v.Reports = hr.Dirs, hr.Reports
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return failErr(err)
		}
		return 0
	}
	var accesses uint64
	for _, r := range sum.Runs {
		accesses += r.Accesses
	}
	fmt.Fprintf(stdout, "trained %s from %d runs (%d accesses) in %v: %d files, %d states\n",
		*out, len(sum.Runs), accesses, elapsed.Round(time.Millisecond), sum.Files, sum.States)
	if hr != nil {
		for i, r := range hr.Reports {
			fmt.Fprintf(stdout, "\nholdout %s:\n", hr.Dirs[i])
			simulate.WriteTable(stdout, r)
		}
	}
	return 0
}

// saveModel writes the model atomically: a partial file never replaces a
// good one.
func saveModel(path string, res *train.Result) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".model-*")
	if err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := res.Model.Save(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	return nil
}
