package record

import (
	"fmt"
	"os"
	"runtime"

	"github.com/predictio/predictio/hints"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

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
	for i := 0; i < n; i++ {
		if err := c.TreeChildEnter(f, uint64(i), 1, children); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}
