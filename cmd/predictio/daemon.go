package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/predictio/predictio/daemon"
)

func init() {
	c := &command{
		name:    "daemon",
		summary: "the system-wide service: learn every program's launches, prefetch them at exec, serve hint sockets, metrics on 127.0.0.1",
		usage: "predictio daemon [--config FILE] [--check]        run in the foreground (systemd: dist/predictio.service)\n" +
			"       predictio daemon status [--socket PATH] [--json]   the running daemon's state\n\n" +
			"SIGHUP reloads the configuration; SIGTERM stops. docs/daemon.md has the configuration keys.",
		example: "sudo predictio daemon --config dist/daemon.toml\n" +
			"sudo predictio daemon status\n" +
			"curl -s 127.0.0.1:9477/metrics | grep predictio_daemon_pages_total",
		subcommands: []string{"status"},
	}
	c.run = func(args []string) int {
		if len(args) > 0 && args[0] == "status" {
			return daemonStatus(c, args[1:])
		}
		return daemonRun(c, args)
	}
	register(c)
}

func daemonRun(c *command, args []string) int {
	fs := newFlagSet(c, "daemon")
	cfgPath := fs.String("config", daemon.DefaultConfigPath, "configuration `FILE` (TOML; a missing default file means the defaults)")
	check := fs.Bool("check", false, "check the configuration and exit")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, fmt.Errorf("daemon: unexpected argument %q; want status or flags", fs.Arg(0)))
	}
	cfg, err := daemon.LoadConfig(*cfgPath, *cfgPath == daemon.DefaultConfigPath)
	if err != nil {
		return fail(2, fmt.Errorf("daemon: %w", err))
	}
	if *check {
		fmt.Printf("predictio daemon: %s is valid\n", *cfgPath)
		return 0
	}
	path := *cfgPath
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		path = ""
	}
	d, err := daemon.New(cfg, daemon.Options{ConfigPath: path})
	if err != nil {
		return fail(1, fmt.Errorf("daemon: %w", err))
	}
	if err := d.Run(context.Background()); err != nil {
		return fail(1, err)
	}
	return 0
}

func daemonStatus(c *command, args []string) int {
	fs := newFlagSet(c, "daemon status")
	sock := fs.String("socket", daemon.Defaults().Socket, "the daemon's control `socket`")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	s, err := daemon.QueryStatus(*sock)
	if err != nil {
		return fail(1, err)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(s, "", "  ")
		fmt.Println(string(b))
		return 0
	}
	fmt.Printf("predictio daemon: pid %d, up %s, backend %s, policies %v\n", s.PID, s.Uptime, s.Backend, s.Policies)
	fmt.Printf("  profiles: %d in %s (%d bytes); metrics: %s; hint socket: %s\n", len(s.Profiles), s.ProfileDir, s.Bytes, orNone(s.Metrics), orNone(s.HintSocket))
	k := s.Counts
	fmt.Printf("  execs: %d seen, %d ignored, %d owned by predictio run; launches: %d learned, %d prefetched, %d not learned (busy)\n",
		k.Execs, k.Ignored, k.Claimed, k.Learned, k.LaunchesPrefetched, k.NotLearned)
	fmt.Printf("  pages: %d requested, %d read ahead, %d already cached, %d requests dropped; by effect: %d prefetched, %d used in time, %d late, %d wasted\n",
		k.PagesRequested, k.PagesSubmitted, k.PagesCached, k.Dropped, k.Prefetched, k.UsedInTime, k.Late, k.Wasted)
	fmt.Printf("  adapters: %d files recognized, %d tree and %d tensor events derived\n", k.AdapterFiles, k.TreeEvents, k.TensorEvents)
	for _, n := range s.Notes {
		fmt.Printf("  note: %s\n", n)
	}
	if len(s.Active) > 0 {
		fmt.Println("\nlearning or following now:")
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PID\tAGE\tPROCESSES\tEVENTS\tPROGRAM")
		for _, a := range s.Active {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\n", a.PID, a.Age, a.Procs, a.Events, a.Program)
		}
		tw.Flush()
	}
	if len(s.Profiles) > 0 {
		fmt.Println("\nprofiles:")
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  LAUNCHES\tFILES\tPAGES\tFOLLOWED\tPROGRAM")
		for _, p := range s.Profiles {
			fmt.Fprintf(tw, "  %d\t%d\t%d\t%s\t%s\n", p.Launches, p.Files, p.Pages, yesNo(p.Followed), p.Program)
		}
		tw.Flush()
	}
	return 0
}

func orNone(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
