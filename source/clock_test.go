package source

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestMonoNowIsClockMonotonic checks that monoNow reads CLOCK_MONOTONIC,
// the clock of the programs' timestamps: each reading lies between two
// clock_gettime(CLOCK_MONOTONIC) calls around it.
func TestMonoNowIsClockMonotonic(t *testing.T) {
	mono := func() uint64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		return uint64(ts.Nano())
	}
	for range 1000 {
		lo := mono()
		v := monoNow()
		hi := mono()
		if v < lo || v > hi {
			t.Fatalf("monoNow %d outside clock_gettime's [%d, %d]", v, lo, hi)
		}
	}
}
