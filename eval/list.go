package eval

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
)

// List prints one suite a line: its name, the paper's figures, what it
// measures, what it needs and its expected time on dev (quick or full) at
// rounds rounds per mode (0: the default), tab-separated.
func List(w io.Writer, quick bool, dev harness.Preset, rounds int) {
	var total time.Duration
	for _, s := range Suites() {
		info := s.Info()
		d := expected(info, quick, dev, rounds)
		total += d
		fmt.Fprintf(w, "%s\tfigure %s\t%s\tneeds: %s\texpected: %s\n", info.Name, info.Figures, info.Measures, info.Needs, fmtDur(d))
	}
	kind := "full"
	if quick {
		kind = "quick"
	}
	fmt.Fprintf(w, "all\t%s\t%s suites on device %s\texpected: %s\n", strings.Join(suiteOrder, ","), kind, dev.Name, fmtDur(total))
}

// expected is a suite's expected time at rounds rounds per mode (0: the
// default). Info.Expected is measured at the default rounds, set-up
// included; other rounds scale all of it, so a set-up-heavy suite is
// overestimated above the default and underestimated below it.
func expected(info Info, quick bool, dev harness.Preset, rounds int) time.Duration {
	if info.Expected == nil {
		return 0
	}
	d := info.Expected(quick, dev)
	if rounds <= 0 {
		return d
	}
	return d * time.Duration(rounds) / time.Duration(defaultRounds(quick))
}

// defaultRounds is the rounds per mode when none are given.
func defaultRounds(quick bool) int {
	if quick {
		return DefaultQuickRounds
	}
	return DefaultRounds
}
