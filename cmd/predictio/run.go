package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/effect"
	"github.com/predictio/predictio/live"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/source"
)

// defaultRunProfile is run's profile directory when --profile is not
// given: /var/lib/predictio/run for root, else under the user's state
// directory.
func defaultRunProfile() string {
	if d := os.Getenv("PREDICTIO_PROFILE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/predictio/run"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "predictio", "run")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "predictio", "run")
	}
	return ""
}

func init() {
	c := &command{
		name:    "run",
		summary: "run a command with live prefetching: its launch profile from the start, policies on its events as they happen, learning every run",
		usage: "predictio run [--profile DIR | --no-profile] [--policy SPEC]... [--model FILE] [--backend kernel|kmod|none] [-o BUNDLE] [--stats] [--json FILE] -- COMMAND [ARGS]\n\n" +
			"The exit status is the command's (128+N when signal N killed it; 127 when it cannot be found, 126 when it cannot run),\n" +
			"1 when predictio itself failed before the command started, 2 for a usage error. If tracing cannot start the command\n" +
			"still runs, with one warning.",
		example: "sudo predictio run -- python3 -c 'import json, decimal'          # learns; the next launches are prefetched\n" +
			"sudo predictio run --profile /var/tmp/prof --stats -- gcc -c hello.c\n" +
			"sudo predictio run --backend none --stats -- sqlite3 db.sqlite 'select count(*) from t'   # noop: policies run, nothing is read",
	}
	c.run = func(args []string) int { return runRun(c, args) }
	register(c)
}

func runRun(c *command, args []string) int {
	fs := newFlagSet(c, c.name)
	profile := fs.String("profile", defaultRunProfile(), "learn into and prefetch from the launch profiles in `DIR` (created 0700; env PREDICTIO_PROFILE_DIR)")
	noProfile := fs.Bool("no-profile", false, "neither read nor learn a launch profile")
	var specs multiFlag
	fs.Var(&specs, "policy", "policy `SPEC` (repeatable; replaces the default launch + markov); see predictio help simulate")
	model := fs.String("model", "", "markov model `FILE` (predictio train markov); default: trained from the profile's launches")
	be := fs.String("backend", "kernel", "prefetch backend: kernel (FADVISE into the page cache), kmod (the predictio module) or none (count and discard: the noop run)")
	out := fs.String("o", "", "also record the run into `BUNDLE`")
	keep := fs.Int("keep", live.DefaultKeep, "launches a profile keeps (its prefetch: the pages at least half of those touching a file read)")
	limit(fs, "keep", 1, policies.MaxLaunches)
	refresh := fs.Duration("refresh", time.Hour, "a full profile learns again once its newest launch is this old; 0: every run learns (and is traced)")
	limit(fs, "refresh", time.Second, 8760*time.Hour).orZero("every run")
	stats := fs.Bool("stats", false, "print what the runtime did to stderr when the command exits")
	eff := fs.Bool("effect", false, "count what the prefetched pages were worth (used in time, late, wasted) with eBPF; loads before the prefetch starts")
	jsonOut := fs.String("json", "", "write the run's counters and timings as JSON to `FILE` (- for stderr)")
	adaptersFlag := fs.String("adapters", "all", "structure adapters in front of the tree and tensor policies: none, all, or a list of sqlite, lmdb, gguf")
	ahead := fs.Int("adapter-ahead", 0, "upcoming B-tree entries the sqlite and lmdb adapters list per step; 0: 16 (keep it at least the tree policy's window)")
	limit(fs, "adapter-ahead", 0, adapters.MaxHintChildren)
	hintsAddr := fs.String("hints", "", "receive application hints on `unix:PATH` for the tree and tensor policies")
	latency := fs.String("latency", "low", "event delivery: low (each event reaches the policies within microseconds; the traced program pays a wakeup per event), batched (every 20 ms or 256 KiB: nearly free for it), or a DURATION from 100us to 1s (batched, looked at every DURATION)")
	daemonSock := fs.String("daemon-socket", live.DefaultDaemonSocket, "tell the daemon on this control `socket` that run owns the command's launches (\"\": don't)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	cmdArgs := fs.Args()
	if len(cmdArgs) == 0 {
		fs.Usage()
		return fail(2, errors.New("run: no command; give it after --"))
	}
	cfg := live.RunConfig{Command: cmdArgs, Keep: *keep, Refresh: *refresh, Backend: *be, Output: *out, ToolVersion: version, DaemonSocket: *daemonSock, Effect: *eff}
	if !*noProfile {
		cfg.Profile = *profile
	}
	if len(specs) > 0 {
		cfg.Policies = specs
	}
	switch *latency {
	case "low":
		cfg.Latency = source.LowLatency
	case "batched":
		cfg.Latency = source.Batched
	default:
		d, err := time.ParseDuration(*latency)
		if err != nil || d < 100*time.Microsecond || d > time.Second {
			return fail(2, fmt.Errorf("run: --latency %q: want low, batched, or a duration from 100us to 1s", *latency))
		}
		cfg.Latency, cfg.Poll = source.Batched, d
	}
	switch *be {
	case "kernel", "kmod", "none":
	default:
		return fail(2, fmt.Errorf("run: --backend %q: want kernel, kmod or none", *be))
	}
	as, err := adapters.ParseList(*adaptersFlag)
	if err != nil {
		return fail(2, fmt.Errorf("run: --adapters: %w", err))
	}
	cfg.Adapters, cfg.AdapterAhead = as, *ahead
	if *hintsAddr != "" {
		p, ok := strings.CutPrefix(*hintsAddr, "unix:")
		if !ok || p == "" {
			return fail(2, fmt.Errorf("run: --hints %q: want unix:/path/to.sock", *hintsAddr))
		}
		cfg.HintSocket = p
	}
	if *model != "" {
		m, err := loadModel(*model)
		if err != nil {
			return fail(2, fmt.Errorf("run: %w", err))
		}
		cfg.Markov = m
	}
	if err := checkRunPolicies(cfg); err != nil {
		return fail(2, fmt.Errorf("run: %w", err))
	}
	res, err := live.Run(context.Background(), cfg)
	if err != nil {
		code := 1
		if errors.Is(err, live.ErrCommand) {
			code = 126
			if errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "executable file not found") {
				code = 127
			}
		}
		return fail(code, fmt.Errorf("run: %w", err))
	}
	if *stats {
		fmt.Fprint(os.Stderr, res.String())
	}
	if *jsonOut != "" {
		if err := writeRunJSON(*jsonOut, res); err != nil {
			fmt.Fprintf(os.Stderr, "predictio run: warning: %v\n", err)
		}
	}
	return res.ExitCode
}

// checkRunPolicies builds each spec once against stand-ins, so that an
// unknown policy or parameter is a usage error before the command runs.
func checkRunPolicies(cfg live.RunConfig) error {
	env := policies.Env{
		Launch:     policies.NewLaunchModel(),
		LaunchFile: func(uint32, *policies.LaunchStep) (uint32, bool) { return 0, false },
		Markov:     cfg.Markov,
	}
	if env.Markov == nil && cfg.Profile != "" {
		env.Markov = policies.NewMarkovBuilder(0).Build() // trained from the profile
	}
	for _, s := range cfg.Policies {
		if _, err := policies.Build(s, env); err != nil {
			return err
		}
	}
	return nil
}

// effectJSON is the effect counts of --json: pages_prefetched,
// pages_used_in_time, pages_late, pages_wasted, ... in total and per
// policy.
type effectJSON struct {
	Total    effect.Counts            `json:"total"`
	Policies map[string]effect.Counts `json:"policies"`
}

// runJSON is --json's document.
type runJSON struct {
	ExitCode    int                   `json:"exit_code"`
	Program     string                `json:"program"`
	Profile     string                `json:"profile,omitempty"`
	Launches    int                   `json:"profile_launches_before"`
	Learned     bool                  `json:"learned"`
	Traced      bool                  `json:"traced"`
	Untraced    string                `json:"untraced,omitempty"`
	StartupNS   int64                 `json:"startup_ns"`
	ShutdownNS  int64                 `json:"shutdown_ns"`
	Events      uint64                `json:"events"`
	Requests    uint64                `json:"requests"`
	Policies    []live.PolicyStats    `json:"policies"`
	Backend     any                   `json:"backend"`
	Via         string                `json:"backend_via"`
	Meta        live.MetaStats        `json:"metadata"`
	ProfileFile live.ProfileFileStats `json:"profile_files"`
	SourceDrops uint64                `json:"source_dropped"`
	Effect      *effectJSON           `json:"effect,omitempty"`
	Notes       []string              `json:"notes,omitempty"`
}

func writeRunJSON(path string, res *live.RunResult) error {
	j := runJSON{
		ExitCode: res.ExitCode, Program: res.Program, Profile: res.ProfileFile, Launches: res.Launches,
		Learned: res.Learned, Traced: res.Traced, StartupNS: int64(res.Startup / time.Nanosecond), ShutdownNS: int64(res.Shutdown),
		Events: res.Loop.Events, Requests: res.Loop.Requests, Policies: res.Loop.Policies, Backend: res.Backend.Stats,
		Via: res.Backend.Via, Meta: res.Loop.Meta, ProfileFile: res.Loop.ProfileFiles, SourceDrops: res.Source.Dropped, Notes: res.Notes,
	}
	if res.Untraced != nil {
		j.Untraced = res.Untraced.Error()
	}
	if res.Effect.Configured {
		j.Effect = &effectJSON{Total: res.Effect.Total, Policies: res.Effect.Policies}
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	var w io.Writer = os.Stderr
	if path != "-" {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("write --json %s: %w", path, err)
		}
		return nil
	}
	_, err = w.Write(b)
	return err
}
