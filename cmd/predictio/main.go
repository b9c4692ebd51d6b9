// Command predictio records, simulates, trains and replays workload-aware
// storage prefetching. Each subcommand's logic lives in its own package; this
// command only parses flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
)

// command is one subcommand of predictio.
type command struct {
	name    string
	summary string
	// usage is the synopsis, e.g. "predictio trace info BUNDLE [--json]".
	usage string
	// example is a runnable example shown by help and -h.
	example string
	// run parses args (without the command name) and returns the exit code.
	run func(args []string) int
	// subcommands are the words after the name that select a nested
	// subcommand with its own flags ("bench engine"); TestFlagRanges runs
	// each with -h to find its flags. trace lists its own in traceSubs.
	subcommands []string
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		usage(os.Stdout)
		return 0
	case "help":
		if len(args) < 2 {
			usage(os.Stdout)
			return 0
		}
		c, ok := commands[args[1]]
		if !ok {
			fmt.Fprintf(os.Stderr, "predictio: unknown command %q; run 'predictio help' for the list\n", args[1])
			return 2
		}
		commandHelp(os.Stdout, c)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "predictio: unknown command %q; run 'predictio help' for the list\n", name)
		return 2
	}
	if f := os.Getenv("PREDICTIO_CPUPROFILE"); f != "" {
		stop, err := cpuProfile(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "predictio: %v\n", err)
			return 1
		}
		defer stop()
	}
	return c.run(args[1:])
}

// cpuProfile writes a Go CPU profile of the command to file
// (PREDICTIO_CPUPROFILE, for `go tool pprof`) until stop is called.
func cpuProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("create CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "predictio: record, simulate, train and replay workload-aware storage prefetching")
	fmt.Fprintln(w, "\nUsage: predictio COMMAND [flags] [args]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'predictio help COMMAND' for a command's flags and an example.")
}

func commandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.usage, c.summary)
	if c.example != "" {
		fmt.Fprintf(w, "\nExample:\n  %s\n", strings.ReplaceAll(c.example, "\n", "\n  "))
	}
}

// flagSetHook, when set (by tests), sees every flag set newFlagSet makes.
var flagSetHook func(*flag.FlagSet)

// newFlagSet returns a FlagSet whose -h output shows the command's usage,
// flags and example.
func newFlagSet(c *command, name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if flagSetHook != nil {
		flagSetHook(fs)
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.usage, c.summary)
		var has bool
		fs.VisitAll(func(*flag.Flag) { has = true })
		if has {
			fmt.Fprintln(w, "\nFlags:")
			fs.PrintDefaults()
		}
		if c.example != "" {
			fmt.Fprintf(w, "\nExample:\n  %s\n", strings.ReplaceAll(c.example, "\n", "\n  "))
		}
	}
	return fs
}

// parseFlags parses args with fs and checks the ranges declared with limit.
// It returns (exit code, false) when the caller should return: 0 after -h,
// 2 after a bad flag or a value out of range.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		if h := rangeHint(fs, err); h != "" {
			fmt.Fprintf(fs.Output(), "predictio %s: %s\n", fs.Name(), h)
		}
		return 2, false
	}
	if err := checkRanges(fs); err != nil {
		fmt.Fprintf(fs.Output(), "predictio %s: %v\n", fs.Name(), err)
		return 2, false
	}
	return 0, true
}

// fail prints err the way every subcommand reports errors and returns code.
func fail(code int, err error) int {
	fmt.Fprintf(os.Stderr, "predictio: %v\n", err)
	return code
}
