// Package tracetest holds what the tests of the event source and the
// recorder share: the helper programs they trace (the test binary re-runs
// itself as one, selected by PREDICTIO_RECORD_HELPER), files made cold or
// warm in the page cache, verified with cachestat(2), and bundles that
// carry the recorder's cost (CostBundle).
package tracetest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/hints"
)

// Main runs the tests of m, or, when PREDICTIO_RECORD_HELPER names one, the
// helper program the tests record instead. Call it from TestMain.
func Main(m *testing.M) {
	switch os.Getenv("PREDICTIO_RECORD_HELPER") {
	case "":
		os.Exit(m.Run())
	case "mmap":
		os.Exit(helperMmap())
	case "pread":
		os.Exit(helperPread())
	case "scan":
		os.Exit(helperScan())
	case "getppid":
		os.Exit(helperGetppid())
	case "syscalls":
		os.Exit(helperSyscalls())
	case "gapcalls":
		os.Exit(helperGapCalls())
	case "hints":
		os.Exit(helperHints())
	case "hintburst":
		os.Exit(helperHintBurst())
	case "preadpaced":
		os.Exit(helperPreadPaced())
	case "stamp":
		// The first thing this helper does: print CLOCK_MONOTONIC (ns),
		// then exit, so one number is both when it started and when
		// it ended.
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		fmt.Println(ts.Nano())
		os.Exit(0)
	}
	os.Exit(3)
}

// MmapPages is the sparse page list the mmap helper touches, in order.
var MmapPages = []uint64{5, 900, 17, 3000, 42, 2500, 1200, 4000}

func helperMmap() int {
	f, err := os.Open(os.Getenv("PREDICTIO_RECORD_FILE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, _ := f.Stat()
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// MADV_RANDOM turns off mmap read-around, so each touch faults one page.
	if err := unix.Madvise(b, unix.MADV_RANDOM); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var sum byte
	for _, p := range MmapPages {
		sum += b[p*4096]
	}
	runtime.KeepAlive(sum) // keeps the loads from being optimized away
	return 0
}

// helperPread preads 4 KiB pages of PREDICTIO_RECORD_FILE round-robin
// PREDICTIO_RECORD_N times and prints the loop's nanoseconds.
func helperPread() int {
	f, err := os.Open(os.Getenv("PREDICTIO_RECORD_FILE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, _ := f.Stat()
	pages := st.Size() / 4096
	n, _ := strconv.Atoi(os.Getenv("PREDICTIO_RECORD_N"))
	buf := make([]byte, 4096)
	start := markCPU()
	for i := 0; i < n; i++ {
		if _, err := unix.Pread(int(f.Fd()), buf, (int64(i)%pages)*4096); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	report(start)
	return 0
}

// helperSyscalls makes PREDICTIO_RECORD_N getppid(2) calls, which the
// recorder does not trace, and reports like helperPread: what tracing
// costs a system call it has no interest in.
func helperSyscalls() int {
	n, _ := strconv.Atoi(os.Getenv("PREDICTIO_RECORD_N"))
	start := markCPU()
	for i := 0; i < n; i++ {
		unix.Getppid()
	}
	report(start)
	return 0
}

// helperGapCalls, on one thread, preads page 0 of PREDICTIO_RECORD_FILE,
// makes PREDICTIO_RECORD_N getppid(2) calls, preads at the file's end
// (0 bytes: no row) and preads page 0 again: the last row's think time
// holds those calls and the read at the end.
func helperGapCalls() int {
	runtime.LockOSThread()
	f, err := os.Open(os.Getenv("PREDICTIO_RECORD_FILE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, _ := f.Stat()
	n, _ := strconv.Atoi(os.Getenv("PREDICTIO_RECORD_N"))
	buf := make([]byte, 4096)
	fd := int(f.Fd())
	if _, err := unix.Pread(fd, buf, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for range n {
		unix.Getppid()
	}
	if m, err := unix.Pread(fd, buf, st.Size()); err != nil || m != 0 {
		fmt.Fprintln(os.Stderr, "pread at the end:", m, err)
		return 1
	}
	if _, err := unix.Pread(fd, buf, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// report prints the wall and CPU (user+sys) nanoseconds since start; BPF
// programs run in the task's context, so their cost shows in its sys time.
func report(start time.Time) {
	wall := time.Since(start).Nanoseconds()
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	cpu := ru.Utime.Nano() + ru.Stime.Nano() - startCPU
	fmt.Println(wall, cpu)
}

var startCPU int64

func markCPU() time.Time {
	runtime.LockOSThread()
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	startCPU = ru.Utime.Nano() + ru.Stime.Nano()
	return time.Now()
}

// helperScan reads PREDICTIO_RECORD_FILE sequentially in 128 KiB reads and
// prints the nanoseconds it took.
func helperScan() int {
	f, err := os.Open(os.Getenv("PREDICTIO_RECORD_FILE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	buf := make([]byte, 128<<10)
	start := markCPU()
	for {
		n, err := f.Read(buf)
		if n == 0 || err != nil {
			break
		}
	}
	report(start)
	return 0
}

// helperGetppid waits for a line on stdin, then calls getppid(2) at
// PREDICTIO_RECORD_RATE calls/s (0: flat out) for PREDICTIO_RECORD_DURATION
// and prints the number of calls.
func helperGetppid() int {
	var line string
	fmt.Scanln(&line)
	rate, _ := strconv.ParseFloat(os.Getenv("PREDICTIO_RECORD_RATE"), 64)
	dur, _ := time.ParseDuration(os.Getenv("PREDICTIO_RECORD_DURATION"))
	start := time.Now()
	end := start.Add(dur)
	var n uint64
	for {
		now := time.Now()
		if now.After(end) {
			break
		}
		if rate > 0 && float64(n) >= now.Sub(start).Seconds()*rate {
			continue
		}
		for i := 0; i < 16; i++ {
			unix.Getppid()
		}
		n += 16
	}
	fmt.Println(n)
	return 0
}

// helperHints dials PREDICTIO_RECORD_SOCK, prints "ready", waits for a line
// on stdin, then sends PREDICTIO_RECORD_N tree_child_enter hints naming
// PREDICTIO_RECORD_FILE.
func helperHints() int {
	c, err := hints.Dial(os.Getenv("PREDICTIO_RECORD_SOCK"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	n, _ := strconv.Atoi(os.Getenv("PREDICTIO_RECORD_N"))
	f := hints.Path(os.Getenv("PREDICTIO_RECORD_FILE"))
	fmt.Println("ready")
	var line string
	fmt.Scanln(&line)
	children := []uint64{10, 11, 12, 13}
	// The client never blocks: a hint the server's full queue refused is
	// dropped, so resend it after a nap, to measure the server's capacity.
	for i := 0; i < n; i++ {
		for sent := c.Stats().Sent; ; {
			if err := c.TreeChildEnter(f, uint64(i), 1, children); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if c.Stats().Sent != sent {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return 0
}

// helperHintBurst is the Go sender of the stopped-recorder tests (the C
// one is record/testdata/hintburst.c, same protocol). It dials
// PREDICTIO_RECORD_SOCK lazily (nothing need listen), prints "ready",
// and on each line of stdin:
//
//	send N   sends N tree_child_enter hints naming PREDICTIO_RECORD_FILE
//	flush    retries Flush every millisecond until it succeeds (10 s at most)
//
// answers with "ns=... sent=... full=... none=... reported=...", and exits
// at the end of stdin.
func helperHintBurst() int {
	c, err := hints.Dialer{Lazy: true}.Dial(os.Getenv("PREDICTIO_RECORD_SOCK"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	f := hints.Path(os.Getenv("PREDICTIO_RECORD_FILE"))
	children := []uint64{10, 11, 12, 13}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		start := time.Now()
		switch cmd {
		case "send":
			n, _ := strconv.Atoi(arg)
			for i := range n {
				if err := c.TreeChildEnter(f, uint64(i), 1, children); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
		case "flush":
			for c.Flush() != nil && time.Since(start) < 10*time.Second {
				time.Sleep(time.Millisecond)
			}
		}
		s := c.Stats()
		fmt.Printf("ns=%d sent=%d full=%d none=%d reported=%d\n", time.Since(start).Nanoseconds(), s.Sent, s.QueueFull, s.NoServer, s.Reported)
	}
	return 0
}

// DiskDir returns a fresh directory on a disk filesystem (not tmpfs), so
// page-cache behaviour is that of a real file.
func DiskDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "predictio-record-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// ColdFile writes size bytes to a new file, evicts it and verifies with
// cachestat (mincore before Linux 6.5) that no page is cached.
// WarmFile is ColdFile read back into the page cache. Tests about whom a
// recording follows use it: reads of cached pages always fire
// mm_filemap_get_pages, so their read coverage does not depend on I/O timing.
func WarmFile(t testing.TB, dir string, size int) string {
	t.Helper()
	p := ColdFile(t, dir, size)
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func ColdFile(t testing.TB, dir string, size int) string {
	t.Helper()
	p := filepath.Join(dir, "data.bin")
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < size; n += len(buf) {
		if _, err := f.Write(buf[:min(len(buf), size-n)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	Evict(t, p)
	return p
}

func Evict(t testing.TB, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < 10; i++ {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		if CachedPages(t, f) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s still has cached pages after POSIX_FADV_DONTNEED", p)
}

// CachedPages counts f's pages in the page cache: with cachestat(2)
// (Linux 6.5), or on older kernels with mincore(2) of a shared read-only
// mapping of the whole file (the caller must own the file or be root).
func CachedPages(t testing.TB, f *os.File) uint64 {
	t.Helper()
	var cs unix.Cachestat_t
	err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0)
	if err == nil {
		return cs.Cache
	}
	if !errors.Is(err, unix.ENOSYS) {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("kernel lacks cachestat(2) (Linux 6.5); mmap for mincore: %v", err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+4095)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		err := error(e)
		t.Fatalf("kernel lacks cachestat(2) (Linux 6.5); mincore: %v", err)
	}
	var n uint64
	for _, v := range vec {
		n += uint64(v & 1)
	}
	return n
}

// helperPreadPaced prints "ready", waits for a line on stdin, then, in
// PREDICTIO_RECORD_THREADS threads (default 1), preads 4 KiB pages of
// PREDICTIO_RECORD_FILE round-robin at PREDICTIO_RECORD_RATE reads/s per
// thread (0: as fast as it can) for PREDICTIO_RECORD_DURATION, and prints
// the number of reads. Between reads more than 200 µs apart it sleeps,
// closer ones it spins for.
func helperPreadPaced() int {
	f, err := os.Open(os.Getenv("PREDICTIO_RECORD_FILE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, _ := f.Stat()
	pages := max(st.Size()/4096, 1)
	rate, _ := strconv.ParseFloat(os.Getenv("PREDICTIO_RECORD_RATE"), 64)
	dur, _ := time.ParseDuration(os.Getenv("PREDICTIO_RECORD_DURATION"))
	threads, _ := strconv.Atoi(os.Getenv("PREDICTIO_RECORD_THREADS"))
	threads = max(threads, 1)
	fmt.Println("ready")
	var line string
	fmt.Scanln(&line)
	counts := make([]int64, threads)
	done := make(chan struct{})
	start := time.Now()
	for t := range threads {
		go func() {
			defer func() { done <- struct{}{} }()
			runtime.LockOSThread()
			buf := make([]byte, 4096)
			var n int64
			for {
				el := time.Since(start)
				if el >= dur {
					break
				}
				if rate > 0 {
					due := time.Duration(float64(n) / rate * float64(time.Second))
					if wait := due - el; wait > 200*time.Microsecond {
						time.Sleep(wait)
						continue
					} else if wait > 0 {
						continue
					}
				}
				if _, err := unix.Pread(int(f.Fd()), buf, (n%pages)*4096); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				n++
			}
			counts[t] = n
		}()
	}
	var total int64
	for range threads {
		<-done
	}
	for _, n := range counts {
		total += n
	}
	fmt.Println(total)
	return 0
}

// CostBundle writes a bundle of format 1.2 that carries the recorder's
// cost, for the --untraced tests: service times on, a
// recording.syscall_cost_ns of 500 ns, one file (id 1, /a, size bytes),
// and rows and hints as given; it returns the bundle's directory.
func CostBundle(t testing.TB, size uint64, rows []formats.Access, hints []formats.Hint) string {
	t.Helper()
	files := []formats.File{{ID: 1, Dev: 0xfc00000, Ino: 12, Path: "/a", Size: size, Mode: 0o100644}}
	return ServiceBundle(t, func(m *formats.Manifest) { m.Recording.SyscallCostNS = 500 }, files, rows, hints)
}

// ServiceBundle writes a bundle with service times on (manifest
// timing.service_times), edit applied to its manifest (nil: none), and
// files, rows and hints as given; it returns the bundle's directory.
func ServiceBundle(t testing.TB, edit func(*formats.Manifest), files []formats.File, rows []formats.Access, hints []formats.Hint) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	w, err := formats.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.Manifest().Timing.ServiceTimes = true
	if edit != nil {
		edit(w.Manifest())
	}
	for _, f := range files {
		if err := w.AddFile(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range rows {
		if err := w.Append(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range hints {
		if err := w.AppendHint(&hints[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
