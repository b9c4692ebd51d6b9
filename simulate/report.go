package simulate

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ParseSize parses a byte size such as 4096, 64KiB, 256MiB, 1GiB, 1G or
// 1.5GB. Binary (KiB, K) and decimal (kB, MB) suffixes are both accepted;
// single letters are binary.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := float64(1)
	units := []struct {
		suf string
		m   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"k", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	for _, u := range units {
		if strings.HasSuffix(t, u.suf) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suf))
			mult = u.m
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult > 1<<62 || v != v {
		return 0, fmt.Errorf("parse size %q: want a number with an optional unit, e.g. 256MiB or 1GiB", s)
	}
	return int64(v * mult), nil
}

// FormatSize formats bytes with a binary unit: 64MiB, 1GiB, 1.5GiB.
func FormatSize(b int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v := float64(b)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) + units[i]
}

// WriteTable writes r as an aligned table. Counts are pages; used is
// used in time, late and wasted are the other two effects of a prefetched
// page; wall is the predicted makespan and speedup the baseline's wall
// over the lane's.
func WriteTable(w io.Writer, r *Report) error {
	cal := "uncalibrated"
	if r.PredictedCalibrated {
		cal = "measured"
	}
	threads := fmt.Sprintf("%d threads", r.Threads)
	if r.Threads == 1 {
		threads = "1 thread"
	}
	fmt.Fprintf(w, "events %d (%.1f M/s), cache %s %s, device %s (%s), readahead %v, %s, think time: %s\n",
		r.Events, r.EventsPerSec/1e6, FormatSize(r.CacheBytes), r.CacheModel, r.Device.Name, cal, onOff(r.Readahead), threads, r.ThinkTime)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tdemand\thits\tmisses\tprefetched\tused\tlate\twasted\tcoverage\taccuracy\tio_amp\tstall\twall\tspeedup\t")
	for i := range r.Policies {
		s := &r.Policies[i]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%s\t%s\t%.3f\t\n",
			s.Name, s.Demand, s.Hits, s.Misses, s.Prefetched, s.Used, s.Late, s.Wasted,
			s.Coverage, s.Accuracy, s.IOAmplification, dur(s.StallNS), dur(s.WallNS), s.Speedup)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.ReadaheadParams != "" && r.Readahead {
		fmt.Fprintf(w, "%s\n", r.ReadaheadParams)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func dur(ns int64) string { return time.Duration(ns).Round(time.Microsecond).String() }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// WriteCurve writes a sweep as one row per cache size and policy.
func WriteCurve(w io.Writer, reports []*Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cache\tpolicy\tmisses\tcoverage\taccuracy\tio_amp\tstall\twall\tspeedup\t")
	for _, r := range reports {
		for i := range r.Policies {
			s := &r.Policies[i]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%s\t%s\t%.3f\t\n", FormatSize(r.CacheBytes), s.Name, s.Misses,
				s.Coverage, s.Accuracy, s.IOAmplification, dur(s.StallNS), dur(s.WallNS), s.Speedup)
		}
	}
	return tw.Flush()
}
