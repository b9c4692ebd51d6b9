package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cmdEvict drops a file's pages from the page cache (fsync, then
// POSIX_FADV_DONTNEED), without touching other files' pages.
func cmdEvict(args []string) error {
	fs := flag.NewFlagSet("evict", flag.ExitOnError)
	fs.Parse(args)
	for _, p := range fs.Args() {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("evict: %w", err)
		}
		err = f.Sync()
		if err == nil {
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("evict %s: %w", p, err)
		}
	}
	return nil
}

// cmdResident prints the 4 KiB pages of a file that are in the page
// cache, one page number a line (mincore).
func cmdResident(args []string) error {
	fs := flag.NewFlagSet("resident", flag.ExitOnError)
	path := fs.String("file", "", "file")
	fs.Parse(args)
	f, err := os.Open(*path)
	if err != nil {
		return fmt.Errorf("resident: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("resident %s: mmap: %w", *path, err)
	}
	defer unix.Munmap(m)
	ps := os.Getpagesize()
	vec := make([]byte, (len(m)+ps-1)/ps)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return fmt.Errorf("resident %s: mincore: %w", *path, e)
	}
	w := bufio.NewWriter(os.Stdout)
	for i, v := range vec {
		if v&1 != 0 {
			fmt.Fprintln(w, i)
		}
	}
	return w.Flush()
}

var (
	reOpen  = regexp.MustCompile(`^(?:\d+ +)?(?:openat\(AT_FDCWD, "([^"]+)".*\) += (\d+)|<\.\.\. openat resumed>.*= (\d+))`)
	reLseek = regexp.MustCompile(`^(?:\d+ +)?lseek\((\d+), -?\d+, SEEK_\w+\) += (\d+)`)
	rePread = regexp.MustCompile(`pread64\((\d+), .*, \d+, (\d+)\) += (\d+)`)
	reRd    = regexp.MustCompile(`[^p]read\((\d+), .*, \d+\) += (\d+)`)
)

// cmdStraceReads prints "OFFSET LENGTH" for every read and pread64 of a
// file in the output of `strace -f -e trace=openat,read,pread64,lseek`,
// following file positions through lseek; only the file's last open
// counts, so earlier opens (a header check) are left out.
func cmdStraceReads(args []string) error {
	fs := flag.NewFlagSet("strace-reads", flag.ExitOnError)
	in := fs.String("in", "", "strace output")
	path := fs.String("path", "", "the file")
	fs.Parse(args)
	f, err := os.Open(*in)
	if err != nil {
		return fmt.Errorf("strace-reads: %w", err)
	}
	defer f.Close()
	fd, pos := "", uint64(0)
	type rd struct{ off, n uint64 }
	var out []rd
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := reOpen.FindStringSubmatch(line); m != nil && m[1] == *path {
			fd, pos, out = m[2], 0, out[:0]
			continue
		}
		if fd == "" {
			continue
		}
		if m := reLseek.FindStringSubmatch(line); m != nil && m[1] == fd {
			pos, _ = strconv.ParseUint(m[2], 10, 64)
		} else if m := rePread.FindStringSubmatch(line); m != nil && m[1] == fd {
			off, _ := strconv.ParseUint(m[2], 10, 64)
			n, _ := strconv.ParseUint(m[3], 10, 64)
			out = append(out, rd{off, n})
		} else if m := reRd.FindStringSubmatch(line); m != nil && m[1] == fd {
			n, _ := strconv.ParseUint(m[2], 10, 64)
			out = append(out, rd{pos, n})
			pos += n
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("strace-reads: %w", err)
	}
	if fd == "" {
		return fmt.Errorf("strace-reads: %s never opened in %s", *path, *in)
	}
	w := bufio.NewWriter(os.Stdout)
	for _, r := range out {
		fmt.Fprintln(w, r.off, r.n)
	}
	return w.Flush()
}
