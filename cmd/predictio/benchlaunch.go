package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/predictio/predictio/live/launchbench"
)

// benchLaunch is `predictio bench launch`: cold launches of real programs
// with predictio run and the daemon (issue 12 items 6 and 7).
func benchLaunch(c *command, args []string) int {
	fs := newFlagSet(c, "bench launch")
	self, _ := os.Executable()
	bin := fs.String("predictio", self, "the predictio `binary` run and the daemon are started from")
	work := fs.String("work", "/var/tmp/predictio-bench-launch", "work `directory`: inputs, profiles, the daemon's files and log")
	programs := fs.String("programs", strings.Join(launchbench.DefaultPrograms, ","), "programs to launch (comma-separated)")
	modes := fs.String("modes", strings.Join(launchbench.DefaultModes, ","), "modes, alternated each round: baseline, run-noop, run, daemon-noop, daemon")
	rounds := fs.Int("rounds", 5, "measured rounds")
	limit(fs, "rounds", 1, 1000)
	learn := fs.Int("learn", 3, "launches learned (by run and by the daemon) before measuring")
	limit(fs, "learn", 1, 64)
	warm := fs.Bool("warm", false, "measure warm launches (no drop_caches) instead of cold ones")
	overhead := fs.Bool("overhead", false, "also measure the daemon's cost on unrelated work (a hot pread loop, a compile)")
	overheadOnly := fs.Bool("overhead-only", false, "measure only the daemon's cost on unrelated work")
	preadFor := fs.Duration("pread-duration", 3*time.Second, "one hot pread measurement's length")
	limit(fs, "pread-duration", 100*time.Millisecond, time.Hour)
	ncomp := fs.Int("compiles", 20, "gcc runs of one compile measurement")
	limit(fs, "compiles", 1, 10000)
	jsonOut := fs.String("json", "", "write the samples and summary as JSON to `FILE`")
	plotOut := fs.String("plot", "", "draw the medians relative to the baseline into `FILE` (.png, .svg, .pdf)")
	mdOut := fs.String("markdown", "", "write the tables for docs/BENCHMARKS.md to `FILE` (- for stdout, the default)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if os.Geteuid() != 0 {
		return fail(1, errors.New("bench launch: needs root (drop_caches, tracing)"))
	}
	ctx := context.Background()
	rep := &launchbench.Report{Started: time.Now(), Rounds: *rounds, Learn: *learn, Warm: *warm}
	if !*overheadOnly {
		cfg := launchbench.Config{Bin: *bin, Work: *work, Programs: splitList(*programs), Modes: splitList(*modes),
			Rounds: *rounds, Learn: *learn, Warm: *warm, Log: os.Stderr}
		r, err := launchbench.Run(ctx, cfg)
		if err != nil {
			return fail(1, err)
		}
		rep = r
	}
	if *overhead || *overheadOnly {
		o, err := launchbench.RunOverhead(ctx, launchbench.OverheadConfig{Bin: *bin, Work: *work, Rounds: *rounds, Duration: *preadFor, Compiles: *ncomp, Log: os.Stderr})
		if err != nil {
			return fail(1, err)
		}
		rep.Overhead = o
	}
	if *jsonOut != "" {
		if err := rep.WriteJSON(*jsonOut); err != nil {
			return fail(1, err)
		}
	}
	if *plotOut != "" && len(rep.Rows) > 0 {
		if err := rep.WritePlot(*plotOut); err != nil {
			return fail(1, err)
		}
	}
	w := os.Stdout
	if *mdOut != "" && *mdOut != "-" {
		f, err := os.Create(*mdOut)
		if err != nil {
			return fail(1, fmt.Errorf("bench launch: %w", err))
		}
		defer f.Close()
		w = f
	}
	rep.WriteMarkdown(w)
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
