// Command workload builds the inputs of the adapter workloads (issue 13):
// YCSB-style SQLite databases, LMDB environments and their range-scan
// reader, GGUF models, and runs llama.cpp's loader on a model.
//
//	go run ./internal/gen/workload sqlite -o ycsb.db -layout without-rowid
//	go run ./internal/gen/workload sqlite -o ycsb-rowid.db -layout rowid
//	go run ./internal/gen/workload sqlite-scan -db ycsb.db -layout without-rowid -by key -start 1000 -n 16384
//	go run ./internal/gen/workload lmdb -o /var/tmp/lmdb-env
//	go run ./internal/gen/workload lmdb-scanner -o /var/tmp/bin
//	go run ./internal/gen/workload gguf -o llama8b-q8.gguf -shape 8b -type q8_0
//	go run ./internal/gen/workload llama -dir /var/tmp/llm -model llama8b-q8.gguf -mmap=false
//
// and three tools of scripts/make-adapter-testdata.sh: evict (drop one
// file's pages from the page cache), resident (list its cached pages) and
// strace-reads (the reads of one file in strace output).
//
// docs/adapters.md describes each workload.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/predictio/predictio/internal/workload/ggufmodel"
	"github.com/predictio/predictio/internal/workload/llamacpp"
	"github.com/predictio/predictio/internal/workload/lmdbenv"
	"github.com/predictio/predictio/internal/workload/sqlitedb"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "sqlite":
		err = cmdSQLite(ctx, os.Args[2:])
	case "sqlite-scan":
		err = cmdSQLiteScan(os.Args[2:])
	case "lmdb":
		err = cmdLMDB(ctx, os.Args[2:])
	case "lmdb-scanner":
		err = cmdScanner(ctx, os.Args[2:])
	case "gguf":
		err = cmdGGUF(os.Args[2:])
	case "llama":
		err = cmdLlama(ctx, os.Args[2:])
	case "evict":
		err = cmdEvict(os.Args[2:])
	case "resident":
		err = cmdResident(os.Args[2:])
	case "strace-reads":
		err = cmdStraceReads(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: workload sqlite|sqlite-scan|lmdb|lmdb-scanner|gguf|llama|evict|resident|strace-reads [flags]; -h after one shows its flags")
	os.Exit(2)
}

func cmdSQLite(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sqlite", flag.ExitOnError)
	var c sqlitedb.Config
	layout := fs.String("layout", string(sqlitedb.WithoutRowid), "without-rowid, rowid or rowid-insert")
	fs.StringVar(&c.Path, "o", "", "database file to create")
	fs.IntVar(&c.Rows, "rows", 0, "rows (0: 400000 without-rowid, 1000000 rowid)")
	fs.IntVar(&c.ValueSize, "value", 0, "value size in bytes (0: 1024)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the insertion order and values")
	fs.BoolVar(&c.Compressible, "compressible", false, "patterned values that compress (test data)")
	fs.StringVar(&c.SQLite, "sqlite3", "", "sqlite3 shell (default: from PATH)")
	fs.IntVar(&c.PageSize, "page-size", 0, "database page size (0: 4096)")
	fs.Parse(args)
	c.Layout = sqlitedb.Layout(*layout)
	return sqlitedb.Build(ctx, c)
}

func cmdSQLiteScan(args []string) error {
	fs := flag.NewFlagSet("sqlite-scan", flag.ExitOnError)
	db := fs.String("db", "", "database file (prints the whole command; without it, only the query)")
	layout := fs.String("layout", string(sqlitedb.WithoutRowid), "without-rowid, rowid or rowid-insert")
	by := fs.String("by", "key", "key or rowid")
	start := fs.Int("start", 0, "first row")
	n := fs.Int("n", 1024, "rows")
	fs.Parse(args)
	q, err := sqlitedb.ScanSQL(sqlitedb.Layout(*layout), sqlitedb.Scan(*by), *start, *n)
	if err != nil {
		return err
	}
	if *db == "" {
		fmt.Println(q)
		return nil
	}
	args = sqlitedb.ScanArgs("", *db, q)
	for i, a := range args {
		if strings.ContainsAny(a, " '*()>=") {
			args[i] = `"` + a + `"`
		}
	}
	fmt.Println(strings.Join(args, " "))
	return nil
}

func cmdLMDB(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lmdb", flag.ExitOnError)
	var c lmdbenv.Config
	fs.StringVar(&c.Dir, "o", "", "environment directory to create")
	fs.IntVar(&c.Entries, "entries", 0, "entries (0: 900000)")
	fs.IntVar(&c.ValueSize, "value", 0, "value size in bytes (0: 1024)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the insertion order and values")
	fs.BoolVar(&c.Compressible, "compressible", false, "patterned values that compress (test data)")
	fs.Parse(args)
	return lmdbenv.Build(ctx, c)
}

func cmdScanner(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lmdb-scanner", flag.ExitOnError)
	dir := fs.String("o", ".", "directory to build lmdb-scan in")
	fs.Parse(args)
	bin, err := lmdbenv.BuildScanner(ctx, *dir, "")
	if err == nil {
		fmt.Println(bin)
	}
	return err
}

func cmdGGUF(args []string) error {
	fs := flag.NewFlagSet("gguf", flag.ExitOnError)
	out := fs.String("o", "", "GGUF file to create")
	shape := fs.String("shape", "8b", "8b (Llama 3 8B-like) or small")
	typ := fs.String("type", "q8_0", "weight type: q8_0, q4_0, f16 or f32")
	order := fs.String("order", string(ggufmodel.OrderHF), "tensor file order: hf or load")
	layers := fs.Int("layers", 0, "override the number of layers")
	headerOnly := fs.Bool("header-only", false, "write the header and tensor infos only")
	seed := fs.Uint64("seed", 1, "seed of the weights")
	fs.Parse(args)
	types := map[string]ggufmodel.Type{"q8_0": ggufmodel.Q8_0, "q4_0": ggufmodel.Q4_0, "f16": ggufmodel.F16, "f32": ggufmodel.F32}
	t, ok := types[*typ]
	if !ok {
		return fmt.Errorf("gguf: type %q; valid: q8_0, q4_0, f16, f32", *typ)
	}
	var m ggufmodel.Model
	switch *shape {
	case "8b":
		m = ggufmodel.Llama8B(t)
	case "small":
		m = ggufmodel.Small(t)
	default:
		return fmt.Errorf("gguf: shape %q; valid: 8b, small", *shape)
	}
	if *layers > 0 {
		m.Layers = *layers
	}
	m.Order, m.Seed = ggufmodel.Order(*order), *seed
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	n, err := ggufmodel.Write(f, m, !*headerOnly)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(*out)
		return err
	}
	fmt.Printf("%s: %d bytes\n", *out, n)
	return nil
}

func cmdLlama(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("llama", flag.ExitOnError)
	dir := fs.String("dir", "/var/tmp/llm", "directory where node-llama-cpp is installed")
	model := fs.String("model", "", "GGUF model")
	mmap := fs.Bool("mmap", false, "load with mmap")
	fs.Parse(args)
	r, err := llamacpp.Load(ctx, *dir, *model, *mmap)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}
