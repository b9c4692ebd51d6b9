package sqlitedb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Read is one read of the database file: Len bytes at byte Off.
type Read struct{ Off, Len uint64 }

var (
	reOpen  = regexp.MustCompile(`^(?:\d+ +)?openat\(AT_FDCWD, "([^"]+)".*\) += (\d+)`)
	reLseek = regexp.MustCompile(`^(?:\d+ +)?lseek\((\d+), -?\d+, SEEK_\w+\) += (\d+)`)
	rePread = regexp.MustCompile(`^(?:\d+ +)?pread64\((\d+), .*, \d+, (\d+)\) += (\d+)`)
	reRead  = regexp.MustCompile(`^(?:\d+ +)?read\((\d+), .*, \d+\) += (\d+)`)
)

// ParseStrace returns the reads of the file at path in the output of
// `strace -e trace=openat,read,pread64,lseek`: pread64s and reads of the
// descriptor the last openat of path returned, in order, with their
// returned lengths. Reads of length 0 are dropped.
func ParseStrace(r io.Reader, path string) ([]Read, error) {
	fd, pos, opened := "", uint64(0), false
	var out []Read
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := reOpen.FindStringSubmatch(line); m != nil {
			if m[1] == path {
				fd, pos, out, opened = m[2], 0, out[:0], true
			} else if m[2] == fd {
				fd = "" // the descriptor was reused for another file
			}
			continue
		}
		if fd == "" {
			continue
		}
		var off, n uint64
		switch m := rePread.FindStringSubmatch(line); {
		case m != nil && m[1] == fd:
			off, _ = strconv.ParseUint(m[2], 10, 64)
			n, _ = strconv.ParseUint(m[3], 10, 64)
		default:
			if m := reLseek.FindStringSubmatch(line); m != nil && m[1] == fd {
				pos, _ = strconv.ParseUint(m[2], 10, 64)
				continue
			}
			m := reRead.FindStringSubmatch(line)
			if m == nil || m[1] != fd {
				continue
			}
			n, _ = strconv.ParseUint(m[2], 10, 64)
			off, pos = pos, pos+n
		}
		if n > 0 {
			out = append(out, Read{off, n})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse strace output: %w", err)
	}
	if !opened {
		return nil, fmt.Errorf("parse strace output: %s is never opened", path)
	}
	return out, nil
}

// ErrNoStrace is returned by TraceReads when strace is not installed.
var ErrNoStrace = errors.New("strace not installed (scripts/setup.sh installs it)")

// TraceReads runs the command args (ScanArgs) under strace and returns its
// reads of the database file at path, which must be the path args name.
func TraceReads(ctx context.Context, args []string, path string) ([]Read, error) {
	st, err := exec.LookPath("strace")
	if err != nil {
		return nil, ErrNoStrace
	}
	dir, err := os.MkdirTemp("", "sqlitedb-trace")
	if err != nil {
		return nil, fmt.Errorf("trace sqlite reads: %w", err)
	}
	defer os.RemoveAll(dir)
	log := filepath.Join(dir, "strace")
	cmd := exec.CommandContext(ctx, st, append([]string{"-o", log, "-e", "trace=openat,read,pread64,lseek"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = io.Discard
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("trace sqlite reads: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	f, err := os.Open(log)
	if err != nil {
		return nil, fmt.Errorf("trace sqlite reads: %w", err)
	}
	defer f.Close()
	return ParseStrace(f, path)
}
