// Package lmdbenv builds LMDB environments filled in random key order with
// Debian's unmodified mdb_load (lmdb-utils), and builds the range-scan
// reader lmdb-scan against Debian's liblmdb (liblmdb-dev).
package lmdbenv

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Defaults of Config fields left zero: 900 K entries of 1 KiB make an
// environment of more than 1 GB (a 4 KiB leaf holds three such entries).
const (
	DefaultEntries   = 900_000
	DefaultValueSize = 1024
	DefaultMapSize   = 8 << 30
)

// Config describes an environment to build.
type Config struct {
	Dir       string // the environment directory; created, must not hold data.mdb
	Entries   int    // 0 means DefaultEntries
	ValueSize int    // 0 means DefaultValueSize
	MapSize   uint64 // 0 means DefaultMapSize
	Seed      uint64
	// Compressible fills values with a repeated pattern instead of random
	// bytes, for small test environments that compress well.
	Compressible bool
	// MDBLoad is the loader; "" means "mdb_load" from PATH.
	MDBLoad string
}

// Key returns the key of entry i.
func Key(i int) string { return fmt.Sprintf("user%010d", i) }

// Order returns the insertion order of entries 0..n-1 for seed.
func Order(n int, seed uint64) []int {
	return rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)).Perm(n)
}

// Build creates the environment: it pipes an mdb_dump-format stream, with
// the entries in random key order, into mdb_load.
func Build(ctx context.Context, cfg Config) error {
	if cfg.Dir == "" {
		return errors.New("build lmdb environment: no directory")
	}
	if cfg.Entries == 0 {
		cfg.Entries = DefaultEntries
	}
	if cfg.ValueSize == 0 {
		cfg.ValueSize = DefaultValueSize
	}
	if cfg.MapSize == 0 {
		cfg.MapSize = DefaultMapSize
	}
	if cfg.MDBLoad == "" {
		cfg.MDBLoad = "mdb_load"
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "data.mdb")); err == nil {
		return fmt.Errorf("build lmdb environment: %s already holds data.mdb; remove it first", cfg.Dir)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("build lmdb environment: %w", err)
	}
	cmd := exec.CommandContext(ctx, cfg.MDBLoad, cfg.Dir)
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("build lmdb environment: %w", err)
	}
	var stderr strings.Builder
	cmd.Stderr, cmd.Stdout = &stderr, io.Discard
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("build lmdb environment: start %s: %w (Debian: apt-get install lmdb-utils)", cfg.MDBLoad, err)
	}
	werr := writeDump(in, &cfg)
	in.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("build lmdb environment %s: %s: %w: %s", cfg.Dir, cfg.MDBLoad, err, strings.TrimSpace(stderr.String()))
	}
	if werr != nil {
		return fmt.Errorf("build lmdb environment %s: write dump: %w", cfg.Dir, werr)
	}
	return nil
}

func writeDump(w io.Writer, cfg *Config) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	fmt.Fprintf(bw, "VERSION=3\nformat=bytevalue\ntype=btree\nmapsize=%d\nmaxreaders=126\nHEADER=END\n", cfg.MapSize)
	r := rand.New(rand.NewPCG(cfg.Seed^0x9e3779b97f4a7c15, cfg.Seed))
	val := make([]byte, cfg.ValueSize)
	line := make([]byte, 1+2*max(cfg.ValueSize, 16)+1)
	for _, i := range Order(cfg.Entries, cfg.Seed) {
		bw.Write(hexLine(line, []byte(Key(i))))
		if cfg.Compressible {
			for j := range val {
				val[j] = byte('a' + (i+j/64)%26)
			}
		} else {
			for j := 0; j < len(val); j += 8 {
				v := r.Uint64()
				for k := 0; k < 8 && j+k < len(val); k++ {
					val[j+k] = byte(v >> (8 * k))
				}
			}
		}
		bw.Write(hexLine(line, val))
	}
	bw.WriteString("DATA=END\n")
	return bw.Flush()
}

// hexLine formats b as a dump data line: a space, hex, a newline.
func hexLine(buf, b []byte) []byte {
	buf = buf[:1+2*len(b)+1]
	buf[0] = ' '
	hex.Encode(buf[1:], b)
	buf[len(buf)-1] = '\n'
	return buf
}

//go:embed csrc/lmdb-scan.c
var scanSource []byte

// ScanSource returns the C source of lmdb-scan.
func ScanSource() []byte { return scanSource }

// BuildScanner compiles lmdb-scan into dir and returns its path. It needs
// a C compiler and liblmdb's header and library (Debian: liblmdb-dev).
func BuildScanner(ctx context.Context, dir, cc string) (string, error) {
	if cc == "" {
		cc = "cc"
	}
	src := filepath.Join(dir, "lmdb-scan.c")
	bin := filepath.Join(dir, "lmdb-scan")
	if err := os.WriteFile(src, scanSource, 0o644); err != nil {
		return "", fmt.Errorf("build lmdb-scan: %w", err)
	}
	out, err := exec.CommandContext(ctx, cc, "-O2", "-o", bin, src, "-llmdb").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build lmdb-scan: %s: %w: %s (Debian: apt-get install liblmdb-dev)", cc, err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// ScanArgs returns the argument vector of a scan of n entries from entry
// start, with MDB_NORDAHEAD when nordahead is set.
func ScanArgs(scanner, dir string, start, n int, nordahead bool) []string {
	args := []string{scanner}
	if nordahead {
		args = append(args, "-nordahead")
	}
	return append(args, dir, Key(start), strconv.Itoa(n))
}
