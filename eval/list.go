package eval

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
)

// List prints one suite a line: its name, the paper's figures, what it
// measures, what it needs and its expected time on dev (quick or full),
// tab-separated.
func List(w io.Writer, quick bool, dev harness.Preset) {
	var total time.Duration
	for _, s := range Suites() {
		info := s.Info()
		var d time.Duration
		if info.Expected != nil {
			d = info.Expected(quick, dev)
		}
		total += d
		fmt.Fprintf(w, "%s\tfigure %s\t%s\tneeds: %s\texpected: %s\n", info.Name, info.Figures, info.Measures, info.Needs, fmtDur(d))
	}
	kind := "full"
	if quick {
		kind = "quick"
	}
	fmt.Fprintf(w, "all\t%s\t%s suites on device %s\texpected: %s\n", strings.Join(suiteOrder, ","), kind, dev.Name, fmtDur(total))
}
