package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/trace"
)

// traceSub is one `predictio trace` subcommand.
type traceSub struct {
	command
	args string // what the positional arguments are, for errors
}

var traceSubs = map[string]*traceSub{}

func addTraceSub(s *traceSub) { traceSubs[s.name] = s }

func init() {
	c := &command{
		name:    "trace",
		summary: "inspect, verify, print, export, import, anonymize, merge, slice, repair and synthesize trace bundles",
	}
	c.usage = "predictio trace SUBCOMMAND [flags] [args]\n\nSubcommands:\n" + traceSubList() +
		"\nRun 'predictio trace SUBCOMMAND -h' for a subcommand's flags and an example. Exit status: 0 ok, 1 failed or problems found, 2 usage error."
	c.example = "predictio trace info testdata/seq\npredictio trace export testdata/seq --parquet /var/tmp/seq-parquet"
	c.run = func(args []string) int {
		trace.ToolVersion = version
		if len(args) == 0 {
			commandHelp(os.Stderr, c)
			return 2
		}
		switch args[0] {
		case "-h", "-help", "--help", "help":
			if len(args) > 1 {
				if s, ok := traceSubs[args[1]]; ok {
					commandHelp(os.Stdout, &s.command)
					return 0
				}
			}
			commandHelp(os.Stdout, c)
			return 0
		}
		s, ok := traceSubs[args[0]]
		if !ok {
			fmt.Fprintf(os.Stderr, "predictio trace: unknown subcommand %q; run 'predictio help trace' for the list\n", args[0])
			return 2
		}
		return s.run(args[1:])
	}
	register(c)
}

// traceSubList lists the subcommands for the trace usage text. Subcommands
// register in init functions of this file, which run before this is called
// only if they are declared first; so the list is static.
func traceSubList() string {
	lines := []string{
		"  info       counts, time span, top files, bytes per event, dropped events",
		"  verify     check integrity, checksums, schema, kinds, timestamps, file_id references and ranges",
		"  cat        print table rows as CSV or JSON lines",
		"  export     write the tables as Parquet (zstd) for DuckDB, pandas, polars, Spark",
		"  import     convert a fio iolog, blkparse output or CSV block trace into a bundle",
		"  anonymize  replace paths (and optionally comm) by salted hashes",
		"  merge      combine bundles, unifying files by (dev, ino) or path",
		"  slice      cut a bundle by time",
		"  repair     recover a bundle whose writer was killed",
		"  synth      write a deterministic synthetic bundle",
	}
	return strings.Join(lines, "\n") + "\n"
}

// verifyAdvice says what to do about the problems trace verify found: repair
// only for a writer that did not finish, never for damaged data.
func verifyAdvice(dir string, errs []error) []string {
	var incomplete, damaged, missing bool
	for _, e := range errs {
		switch {
		case errors.Is(e, formats.ErrIncomplete):
			incomplete = true
		case errors.Is(e, formats.ErrCorrupt):
			damaged = true
		case errors.Is(e, formats.ErrMissingFiles):
			missing = true
		}
	}
	var out []string
	if incomplete {
		out = append(out, fmt.Sprintf("the bundle's writer did not finish (killed, or the power failed): 'predictio trace repair %s' recovers every batch it wrote", dir))
	}
	if damaged {
		out = append(out, "the data changed after it was written (bit rot, an overwrite, a bad copy): restore the bundle from a copy; repair cannot restore damaged data, and --no-verify reads it as it is")
	}
	if missing && !incomplete && !damaged {
		if b, err := formats.Open(dir); err == nil {
			if err := b.CheckReferences(); err != nil {
				out = append(out, err.Error())
			}
		}
	}
	return out
}

// parseArgs parses flags that may come before, between or after the
// positional arguments (as in `trace info BUNDLE --json`) and returns the
// positionals.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return nil, code, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), 0, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// traceFail prints err and returns 2 for usage errors, 1 otherwise.
func traceFail(err error) int {
	if errors.Is(err, trace.ErrUsage) {
		return fail(2, err)
	}
	return fail(1, err)
}

// parse parses args (flags may follow positional arguments) and checks
// that there are n positional arguments. When ok is false the subcommand
// exits with code.
func (s *traceSub) parse(fs *flag.FlagSet, args []string, n int) (pos []string, code int, ok bool) {
	if pos, code, ok = parseArgs(fs, args); !ok {
		return nil, code, false
	}
	if len(pos) != n {
		fmt.Fprintf(os.Stderr, "predictio trace %s: want %s, got %d argument(s)\n", s.name, s.args, len(pos))
		fmt.Fprintf(os.Stderr, "Usage: %s\n", s.usage)
		return nil, 2, false
	}
	return pos, 0, true
}

// noVerifyUsage is the help text of --no-verify.
const noVerifyUsage = "skip the bundle integrity checks (CRC32C of every message; zstd checksums and SHA-256 for format 1.0) and read damaged data as it is; the output says so"

// noVerifyNote is what a command prints on stderr with --no-verify.
const noVerifyNote = "predictio: --no-verify: bundle integrity checks skipped; damaged data is read as it is"

// noVerifyOpts returns the open options for --no-verify and says on stderr
// that verification is skipped.
func noVerifyOpts(noVerify bool) []formats.OpenOption {
	if !noVerify {
		return nil
	}
	fmt.Fprintln(os.Stderr, noVerifyNote)
	return []formats.OpenOption{formats.NoVerify()}
}

// addNoVerifyFlag adds --no-verify to a command that opens bundles through
// packages that take no open options (simulate, replay, train). The
// returned function, called after parsing, makes formats.Open skip the
// checks for the process and says so on stderr.
func addNoVerifyFlag(fs *flag.FlagSet, stderr io.Writer) func() {
	nv := fs.Bool("no-verify", false, noVerifyUsage)
	return func() {
		if *nv {
			formats.SetDefaultVerify(false)
			fmt.Fprintln(stderr, noVerifyNote)
		}
	}
}

func printJSON(v any) int {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(1, err)
	}
	return 0
}

func init() {
	s := &traceSub{args: "one BUNDLE"}
	s.command = command{
		name:    "info",
		summary: "print counts, time span, top files by accesses, per-kind counts, bytes per event on disk and dropped events",
		usage:   "predictio trace info BUNDLE [--json] [--top N] [--no-verify]",
		example: "predictio trace info testdata/seq\npredictio trace info --json testdata/btree",
	}
	s.run = func(args []string) int {
		fs := newFlagSet(&s.command, "trace info")
		asJSON := fs.Bool("json", false, "print JSON (keys: events, hints, files, duration_ns, bytes_per_event, dropped, kinds, top_files, ...)")
		top := fs.Int("top", 10, "number of files to list by access count")
		limit(fs, "top", 0, 1<<20)
		noVerify := fs.Bool("no-verify", false, noVerifyUsage)
		pos, code, ok := s.parse(fs, args, 1)
		if !ok {
			return code
		}
		sum, err := trace.Info(pos[0], *top, noVerifyOpts(*noVerify)...)
		if err != nil {
			return traceFail(err)
		}
		if *asJSON {
			return printJSON(sum)
		}
		if err := sum.WriteText(os.Stdout); err != nil {
			return fail(1, err)
		}
		return 0
	}
	addTraceSub(s)

	s2 := &traceSub{args: "one BUNDLE"}
	s2.command = command{
		name:    "verify",
		summary: "check integrity (CRC32C), checksums, schemas, kind rules, timestamp sanity, file_id references and ranges; exit 1 listing every problem and what to do",
		usage:   "predictio trace verify BUNDLE",
		example: "predictio trace verify testdata/seq",
	}
	s2.run = func(args []string) int {
		fs := newFlagSet(&s2.command, "trace verify")
		pos, code, ok := s2.parse(fs, args, 1)
		if !ok {
			return code
		}
		errs := trace.Verify(pos[0])
		if len(errs) == 0 {
			fmt.Printf("%s: ok\n", pos[0])
			return 0
		}
		for _, e := range errs {
			fmt.Fprintf(os.Stderr, "%s: %v\n", pos[0], e)
		}
		fmt.Fprintf(os.Stderr, "predictio: %s: %d problem(s) found\n", pos[0], len(errs))
		for _, advice := range verifyAdvice(pos[0], errs) {
			fmt.Fprintf(os.Stderr, "  %s\n", advice)
		}
		return 1
	}
	addTraceSub(s2)

	s3 := &traceSub{args: "one BUNDLE"}
	s3.command = command{
		name:    "cat",
		summary: "print the rows of one table as CSV or JSON lines",
		usage:   "predictio trace cat BUNDLE [--table accesses|hints|files] [--format csv|jsonl] [--limit N] [--no-verify]",
		example: "predictio trace cat testdata/btree --table hints --format jsonl --limit 5",
	}
	s3.run = func(args []string) int {
		fs := newFlagSet(&s3.command, "trace cat")
		var o trace.CatOptions
		fs.StringVar(&o.Table, "table", "accesses", "table: accesses, hints or files")
		fs.StringVar(&o.Format, "format", "csv", "output format: csv or jsonl")
		fs.IntVar(&o.Limit, "limit", 0, "print at most N rows (0: all)")
		limit(fs, "limit", 1, math.MaxInt).orZero("all")
		noVerify := fs.Bool("no-verify", false, noVerifyUsage)
		pos, code, ok := s3.parse(fs, args, 1)
		if !ok {
			return code
		}
		if err := trace.Cat(os.Stdout, pos[0], o, noVerifyOpts(*noVerify)...); err != nil {
			return traceFail(err)
		}
		return 0
	}
	addTraceSub(s3)

	s4 := &traceSub{args: "one BUNDLE"}
	s4.command = command{
		name:    "export",
		summary: "write each table as a zstd Parquet file (files/accesses/hints.parquet) readable by DuckDB, pandas, polars and Spark",
		usage:   "predictio trace export BUNDLE --parquet DIR [--no-verify]",
		example: "predictio trace export testdata/seq --parquet /var/tmp/seq-parquet",
	}
	s4.run = func(args []string) int {
		fs := newFlagSet(&s4.command, "trace export")
		dir := fs.String("parquet", "", "directory to write the .parquet files into (created if needed)")
		noVerify := fs.Bool("no-verify", false, noVerifyUsage)
		pos, code, ok := s4.parse(fs, args, 1)
		if !ok {
			return code
		}
		if *dir == "" {
			fmt.Fprintln(os.Stderr, "predictio trace export: --parquet DIR is required")
			return 2
		}
		res, err := trace.ExportParquet(pos[0], *dir, noVerifyOpts(*noVerify)...)
		if err != nil {
			return traceFail(err)
		}
		for _, t := range res {
			fmt.Printf("%s: %d rows, %d bytes\n", t.Path, t.Rows, t.Bytes)
		}
		return 0
	}
	addTraceSub(s4)

	s5 := &traceSub{args: "one FILE"}
	s5.command = command{
		name:    "import",
		summary: "convert a fio iolog (v2/v3), blkparse text output or a CSV block trace (MSR Cambridge, Alibaba, or any with --map) into a bundle; see docs/trace.md for what each source lacks",
		usage:   "predictio trace import --from fio|blkparse|csv FILE -o BUNDLE [--preset msr|alibaba] [--map 'ts=0,offset=4,size=5,...'] [--ts-unit U] [--header] [--ops read|all] [--action Q|D|C]",
		example: "predictio trace import --from fio testdata/fio/randread.iolog -o /var/tmp/fio-bundle\npredictio trace import --from csv --preset msr testdata/csv/msr-sample.csv -o /var/tmp/msr-bundle",
	}
	s5.run = func(args []string) int {
		fs := newFlagSet(&s5.command, "trace import")
		var o trace.ImportOptions
		out := fs.String("o", "", "output bundle directory (must not exist or be empty)")
		fs.StringVar(&o.From, "from", "", "source format: fio, blkparse or csv")
		fs.StringVar(&o.Map, "map", "", "CSV columns: FIELD=COLUMN,... (0-based index or header name); fields ts, offset, size (required), op, dev, host, pid, comm")
		fs.StringVar(&o.Preset, "preset", "", "CSV layout: msr (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime) or alibaba (device_id,opcode,offset,length,timestamp)")
		fs.StringVar(&o.TSUnit, "ts-unit", "", "CSV timestamp unit: ns, us, ms, s, filetime, unix-s, unix-ms, unix-us, unix-ns (default ns, or the preset's)")
		fs.BoolVar(&o.Header, "header", false, "the first CSV line holds column names")
		fs.StringVar(&o.Ops, "ops", "read", "operations to import: read, or all (reads and writes)")
		fs.StringVar(&o.Action, "action", "Q", "blkparse action to import: Q (queued), D (issued) or C (completed)")
		fs.IntVar(&o.PageSize, "page-size", 0, "page size for byte-to-page conversion (default: this machine's)")
		limit(fs, "page-size", 512, 1<<30).powerOfTwo().orZero("this machine's")
		pos, code, ok := s5.parse(fs, args, 1)
		if !ok {
			return code
		}
		if *out == "" || o.From == "" {
			fmt.Fprintln(os.Stderr, "predictio trace import: --from and -o are required")
			return 2
		}
		o.CommandLine = append([]string{"predictio"}, os.Args[1:]...)
		rep, err := trace.Import(pos[0], *out, o)
		if err != nil {
			return traceFail(err)
		}
		fmt.Printf("%s: %d events, %d files from %d lines\n", *out, rep.Events, rep.Files, rep.Lines)
		for _, n := range rep.Notes {
			fmt.Printf("  note: %s\n", n)
		}
		return 0
	}
	addTraceSub(s5)

	s6 := &traceSub{args: "one BUNDLE"}
	s6.command = command{
		name:    "anonymize",
		summary: "copy a bundle replacing paths (and with --comm, process names) by salted HMAC-SHA256 hashes, keeping extension and directory depth",
		usage:   "predictio trace anonymize BUNDLE -o OUT [--salt S] [--comm] [--no-verify]",
		example: "predictio trace anonymize testdata/btree -o /var/tmp/btree-anon --salt team-secret",
	}
	s6.run = func(args []string) int {
		fs := newFlagSet(&s6.command, "trace anonymize")
		out := fs.String("o", "", "output bundle directory")
		var o trace.AnonymizeOptions
		fs.StringVar(&o.Salt, "salt", "", "hash key; the same salt gives the same hashes across bundles (default: random, not stored)")
		fs.BoolVar(&o.Comm, "comm", false, "also hash process names (comm)")
		noVerify := fs.Bool("no-verify", false, noVerifyUsage)
		pos, code, ok := s6.parse(fs, args, 1)
		if !ok {
			return code
		}
		if *out == "" {
			fmt.Fprintln(os.Stderr, "predictio trace anonymize: -o OUT is required")
			return 2
		}
		cc, err := trace.Anonymize(pos[0], *out, o, noVerifyOpts(*noVerify)...)
		if err != nil {
			return traceFail(err)
		}
		fmt.Printf("%s: %d files, %d events, %d hints\n", *out, cc.Files, cc.Events, cc.Hints)
		return 0
	}
	addTraceSub(s6)

	s7 := &traceSub{args: "one or more BUNDLEs"}
	s7.command = command{
		name:    "merge",
		summary: "combine bundles into one: files renumbered and unified by (dev, ino) or path, rows interleaved by timestamp, sources noted in the manifest",
		usage:   "predictio trace merge -o OUT [--no-verify] BUNDLE1 BUNDLE2 ...",
		example: "predictio trace merge -o /var/tmp/sparse-all testdata/sparse-run1 testdata/sparse-run2",
	}
	s7.run = func(args []string) int {
		fs := newFlagSet(&s7.command, "trace merge")
		out := fs.String("o", "", "output bundle directory")
		noVerify := fs.Bool("no-verify", false, noVerifyUsage)
		pos, code, ok := parseArgs(fs, args)
		if !ok {
			return code
		}
		if len(pos) == 0 || *out == "" {
			fmt.Fprintf(os.Stderr, "predictio trace merge: want -o OUT and at least one BUNDLE\nUsage: %s\n", s7.usage)
			return 2
		}
		rep, err := trace.Merge(*out, pos, noVerifyOpts(*noVerify)...)
		if err != nil {
			return traceFail(err)
		}
		fmt.Printf("%s: %d inputs, %d files (%d unified), %d events, %d hints\n", *out, rep.Inputs, rep.Files, rep.Unified, rep.Events, rep.Hints)
		return 0
	}
	addTraceSub(s7)

	s8 := &traceSub{args: "one BUNDLE"}
	s8.command = command{
		name:    "slice",
		summary: "copy the rows with FROM <= ts_ns < TO; durations (1.5s, 250ms) count from the bundle start, plain integers are absolute ts_ns",
		usage:   "predictio trace slice BUNDLE -o OUT [--from D] [--to D] [--no-verify]",
		example: "predictio trace slice testdata/seq -o /var/tmp/seq-head --to 10ms",
	}
	s8.run = func(args []string) int {
		fs := newFlagSet(&s8.command, "trace slice")
		out := fs.String("o", "", "output bundle directory")
		from := fs.String("from", "", "start of the window (inclusive): duration from the bundle start, or absolute ts_ns")
		to := fs.String("to", "", "end of the window (exclusive): duration from the bundle start, or absolute ts_ns")
		noVerify := fs.Bool("no-verify", false, noVerifyUsage)
		pos, code, ok := s8.parse(fs, args, 1)
		if !ok {
			return code
		}
		if *out == "" {
			fmt.Fprintln(os.Stderr, "predictio trace slice: -o OUT is required")
			return 2
		}
		fb, err := trace.ParseBound(*from)
		if err != nil {
			return fail(2, fmt.Errorf("--from: %w", err))
		}
		tb, err := trace.ParseBound(*to)
		if err != nil {
			return fail(2, fmt.Errorf("--to: %w", err))
		}
		rep, err := trace.Slice(pos[0], *out, fb, tb, noVerifyOpts(*noVerify)...)
		if err != nil {
			return traceFail(err)
		}
		fmt.Printf("%s: %d events, %d hints with ts_ns in [%d, %d)\n", *out, rep.Events, rep.Hints, rep.FromNS, rep.ToNS)
		return 0
	}
	addTraceSub(s8)

	s9 := &traceSub{args: "one BUNDLE"}
	s9.command = command{
		name:    "repair",
		summary: "recover, in place, a bundle whose writer was killed (SIGKILL, power cut) up to the last flushed batch",
		usage:   "predictio trace repair BUNDLE",
		example: "predictio trace repair /var/tmp/killed-bundle && predictio trace verify /var/tmp/killed-bundle",
	}
	s9.run = func(args []string) int {
		fs := newFlagSet(&s9.command, "trace repair")
		pos, code, ok := s9.parse(fs, args, 1)
		if !ok {
			return code
		}
		rep, err := trace.Repair(pos[0])
		if err != nil {
			return traceFail(err)
		}
		if rep.AlreadyComplete {
			fmt.Printf("%s: complete and verifies; nothing to repair\n", pos[0])
			return 0
		}
		names := make([]string, 0, len(rep.Tables))
		for n := range rep.Tables {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Printf("%s: recovered %d rows", n, rep.Tables[n])
			if d := rep.DroppedBytes[n]; d > 0 {
				fmt.Printf(" (cut %d bytes of a partly written batch)", d)
			}
			fmt.Println()
		}
		for _, n := range rep.Notes {
			fmt.Printf("  %s\n", n)
		}
		return 0
	}
	addTraceSub(s9)

	s10 := &traceSub{args: "no arguments"}
	s10.command = command{
		name:    "synth",
		summary: "write a deterministic synthetic bundle: seq, stride, random, zipf (one file, Zipf-weighted pages, --zipf-s the exponent), sparse (recurring, --run selects the run), btree (with hints) or launch (a program start: exec, opens, stats, readdir, mmap and faults with their protection, reads; service times)",
		usage:   "predictio trace synth -o DIR --pattern seq|stride|random|zipf|sparse|btree|launch [--events N] [--files N] [--file-pages N] [--stride N] [--zipf-s S] [--run N] [--seed N] [--think-ns N] [--service-ns N]",
		example: "predictio trace synth -o /var/tmp/rand --pattern random --events 100000 --seed 7",
	}
	s10.run = func(args []string) int {
		fs := newFlagSet(&s10.command, "trace synth")
		out := fs.String("o", "", "output bundle directory")
		var spec formats.SynthSpec
		fs.StringVar(&spec.Pattern, "pattern", "", "access pattern: seq, stride, random, zipf, sparse, btree or launch")
		fs.IntVar(&spec.Events, "events", 100000, "number of accesses")
		fs.IntVar(&spec.Files, "files", 1, "number of files (launch: of libraries)")
		fs.Uint64Var(&spec.FilePages, "file-pages", 0, "pages per file (0: events/files for seq, 1048576 for zipf, else 262144; zipf: at most 67108864)")
		fs.Uint64Var(&spec.Stride, "stride", 0, "page step for --pattern stride (default 16), fanout for btree (default 64)")
		fs.Float64Var(&spec.ZipfS, "zipf-s", 0.9, "Zipf exponent `S` of --pattern zipf, more than 0: the page of rank k has weight 1/k^S")
		fs.IntVar(&spec.Run, "run", 0, "run of --pattern sparse or btree: runs share the sequence of --seed (sparse: 90% of it) and differ in the rest")
		fs.Int64Var(&spec.Seed, "seed", 1, "random seed")
		fs.Uint64Var(&spec.ThinkNS, "think-ns", 2000, "mean time between accesses in ns")
		fs.Uint64Var(&spec.ServiceNS, "service-ns", 0, "give every access this service time in ns (end_ns = ts_ns + N; format 1.1); launch: default 20000")
		limit(fs, "events", 1, 1_000_000_000)
		limit(fs, "files", 1, 1<<20)
		limit[uint64](fs, "file-pages", 1, 1<<40).orZero("events/files for seq, 1048576 for zipf, else 262144")
		limit[uint64](fs, "stride", 1, 1<<40).orZero("16, or 64 for btree")
		limit(fs, "zipf-s", 1e-9, 10.0)
		limit(fs, "run", 0, 1_000_000)
		limit[int64](fs, "seed", math.MinInt64, math.MaxInt64)
		limit[uint64](fs, "think-ns", 1, 1_000_000_000)
		limit[uint64](fs, "service-ns", 1, 1_000_000_000).orZero("none; launch: 20000")
		_, code, ok := s10.parse(fs, args, 0)
		if !ok {
			return code
		}
		if *out == "" || spec.Pattern == "" {
			fmt.Fprintln(os.Stderr, "predictio trace synth: -o DIR and --pattern are required")
			return 2
		}
		if spec.Pattern == "btree" && spec.Stride == 1 {
			fmt.Fprintln(os.Stderr, "predictio trace synth: flag --stride 1 is out of range for --pattern btree: want 0 (fanout 64) or a fanout of 2 or more")
			return 2
		}
		if spec.Pattern == "zipf" && spec.Files != 1 {
			fmt.Fprintf(os.Stderr, "predictio trace synth: flag --files %d is out of range for --pattern zipf: want 1 (zipf reads one file)\n", spec.Files)
			return 2
		}
		if spec.Pattern == "zipf" && spec.FilePages > formats.SynthZipfMaxPages {
			fmt.Fprintf(os.Stderr, "predictio trace synth: flag --file-pages %d is out of range for --pattern zipf: want 0 (1048576) or 1 to %d\n", spec.FilePages, formats.SynthZipfMaxPages)
			return 2
		}
		if err := trace.Synth(*out, spec); err != nil {
			return traceFail(err)
		}
		fmt.Printf("%s: %s bundle written\n", *out, spec.Pattern)
		return 0
	}
	addTraceSub(s10)
}
