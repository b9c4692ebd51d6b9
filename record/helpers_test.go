package record

import (
	"fmt"
	"os"
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
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := unix.Pread(int(f.Fd()), buf, (int64(i)%pages)*4096); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
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
	start := time.Now()
	for {
		n, err := f.Read(buf)
		if n == 0 || err != nil {
			break
		}
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}
