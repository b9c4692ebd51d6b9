package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// Matrix is a sweep over backends, thread counts and queue depths.
type Matrix struct {
	Template Point // Path, Size, RW, Duration, CPUs and the uring options
	// AutoCPUs pins each point's threads to AutoCPUs(path, threads)
	// instead of Template.CPUs.
	AutoCPUs bool
	Backends []string
	Threads  []int
	QDs      []int
	Reps     int    // repetitions per point (A/B interleaved with fio when Fio is set)
	Fio      string // fio binary; empty: no fio runs
	Progress io.Writer
}

// Comparison is our median against fio's for one point.
type Comparison struct {
	Backend   string  `json:"backend"`
	Threads   int     `json:"threads"`
	QD        int     `json:"qd"`
	Reps      int     `json:"reps"`
	OursIOPS  float64 `json:"ours_iops"`
	OursMin   float64 `json:"ours_iops_min"`
	OursMax   float64 `json:"ours_iops_max"`
	FioIOPS   float64 `json:"fio_iops"`
	FioMin    float64 `json:"fio_iops_min"`
	FioMax    float64 `json:"fio_iops_max"`
	Ratio     float64 `json:"iops_ratio"` // ours / fio, medians
	OursP99us float64 `json:"ours_p99_us"`
	FioP99us  float64 `json:"fio_p99_us"`
	OursCPU   float64 `json:"ours_cpu_us_per_op"`
	FioCPU    float64 `json:"fio_cpu_us_per_op"`
	// OursOnIRQ and FioOnIRQ are the median shares of the worker threads'
	// run time on the device's completion-interrupt CPUs (-1: unknown).
	OursOnIRQ float64  `json:"ours_on_irq_cpu_share"`
	FioOnIRQ  float64  `json:"fio_on_irq_cpu_share"`
	OursCS    float64  `json:"ours_ctx_switches_per_op"`
	FioCS     float64  `json:"fio_ctx_switches_per_op"`
	Matched   []string `json:"fio_matched"`
	Notes     []string `json:"fio_differs,omitempty"`
}

// Report is the output of a matrix run.
type Report struct {
	Date       time.Time `json:"date"`
	Kernel     string    `json:"kernel"`
	CPUs       int       `json:"cpus"`
	LoadBefore string    `json:"loadavg_before"`
	LoadAfter  string    `json:"loadavg_after"`
	File       string    `json:"file"`
	Size       int64     `json:"size"`
	// IRQCPUs are the CPUs taking the completion interrupts of the file's
	// device ("" when unknown).
	IRQCPUs     string       `json:"completion_irq_cpus"`
	Points      []Result     `json:"points"`
	Comparisons []Comparison `json:"vs_fio,omitempty"`
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	var u unix.Utsname
	unix.Uname(&u)
	return unix.ByteSliceToString(u.Release[:])
}

// Run runs the matrix. psync has no queue-depth axis and runs once per
// thread count, at QD 1.
func (m *Matrix) Run() (*Report, error) {
	rep := &Report{Date: time.Now().UTC(), Kernel: kernel(), CPUs: runtime.NumCPU(), LoadBefore: loadavg(),
		File: m.Template.Path, Size: m.Template.Size, IRQCPUs: formatCPUList(CompletionIRQCPUs(m.Template.Path))}
	if m.Reps < 1 {
		m.Reps = 1
	}
	for _, b := range m.Backends {
		for _, th := range m.Threads {
			qds := m.QDs
			if b == Psync {
				qds = []int{1}
			}
			for _, qd := range qds {
				p := m.Template
				p.Backend, p.Threads, p.QD = b, th, qd
				if m.AutoCPUs {
					p.CPUs = AutoCPUs(p.Path, th)
				}
				var ours, theirs []Result
				var job FioJob
				for r := 0; r < m.Reps; r++ {
					// A/B: alternate which tool goes first.
					order := []bool{false, true}
					if r%2 == 1 {
						order = []bool{true, false}
					}
					for _, isFio := range order {
						if isFio && m.Fio == "" {
							continue
						}
						var res Result
						var err error
						if isFio {
							res, job, err = RunFio(m.Fio, p)
						} else {
							res, err = Run(p)
						}
						if err != nil {
							return rep, err
						}
						res.Rep = r
						rep.Points = append(rep.Points, res)
						if isFio {
							theirs = append(theirs, res)
						} else {
							ours = append(ours, res)
						}
						if m.Progress != nil {
							fmt.Fprintf(m.Progress, "%-9s %-19s thr %d qd %3d rep %d: %8.0f IOPS p99 %7.0f us\n", res.Tool, b, th, qd, r, res.IOPS, res.P99us)
						}
					}
				}
				if len(theirs) > 0 {
					c := Comparison{Backend: b, Threads: th, QD: qd, Reps: m.Reps, Matched: job.Matched, Notes: job.Notes}
					c.OursIOPS, c.OursMin, c.OursMax = medianOf(ours, func(r Result) float64 { return r.IOPS })
					c.FioIOPS, c.FioMin, c.FioMax = medianOf(theirs, func(r Result) float64 { return r.IOPS })
					c.OursP99us, _, _ = medianOf(ours, func(r Result) float64 { return r.P99us })
					c.FioP99us, _, _ = medianOf(theirs, func(r Result) float64 { return r.P99us })
					c.OursCPU, _, _ = medianOf(ours, func(r Result) float64 { return r.CPUus })
					c.FioCPU, _, _ = medianOf(theirs, func(r Result) float64 { return r.CPUus })
					c.OursOnIRQ, _, _ = medianOf(ours, onIRQ)
					c.FioOnIRQ, _, _ = medianOf(theirs, onIRQ)
					c.OursCS, _, _ = medianOf(ours, func(r Result) float64 { return r.CtxSwitches })
					c.FioCS, _, _ = medianOf(theirs, func(r Result) float64 { return r.CtxSwitches })
					if c.FioIOPS > 0 {
						c.Ratio = c.OursIOPS / c.FioIOPS
					}
					rep.Comparisons = append(rep.Comparisons, c)
				}
			}
		}
	}
	rep.LoadAfter = loadavg()
	return rep, nil
}

func onIRQ(r Result) float64 {
	if r.OnIRQCPU == nil {
		return -1
	}
	return *r.OnIRQCPU
}

func medianOf(rs []Result, f func(Result) float64) (med, lo, hi float64) {
	if len(rs) == 0 {
		return 0, 0, 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	n := len(v)
	med = v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return med, v[0], v[n-1]
}

func pct(f float64) string {
	if f < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

// WriteTable prints the report as aligned tables.
func (r *Report) WriteTable(w io.Writer) {
	irq := r.IRQCPUs
	if irq == "" {
		irq = "unknown"
	}
	fmt.Fprintf(w, "# %s, kernel %s, %d CPUs, load %s -> %s, file %s (%d MiB), O_DIRECT, completion IRQs on CPU %s\n",
		r.Date.Format(time.RFC3339), r.Kernel, r.CPUs, r.LoadBefore, r.LoadAfter, r.File, r.Size>>20, irq)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tool\tbackend\trw\tthreads\tqd\trep\tIOPS\tMiB/s\tp50 us\tp99 us\tp99.9 us\tsyscalls/op\tcpu us/op\tpoller us/op\tcs/op\tmigr/op\tpinned\trun on CPU\tcached\t")
	for _, p := range r.Points {
		sc := fmt.Sprintf("%.3f", p.Syscalls)
		if p.Syscalls < 0 {
			sc = "-"
		}
		pin := p.CPUs
		if pin == "" {
			pin = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t%s\t%.2f\t%.2f\t%.3f\t%.4f\t%s\t%s\t%d\t\n",
			p.Tool, p.Backend, p.RW, p.Threads, p.QD, p.Rep, p.IOPS, p.MiBs, p.P50us, p.P99us, p.P999us, sc, p.CPUus, p.PollerCPUus,
			p.CtxSwitches, p.Migrations, pin, p.Placement, p.CachedPages)
	}
	tw.Flush()
	if len(r.Comparisons) == 0 {
		return
	}
	fmt.Fprintln(w, "\n# ours / fio (medians of the interleaved repetitions, [min-max])")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tthreads\tqd\tours IOPS\tfio IOPS\tratio\tours p99\tfio p99\tours cpu/op\tfio cpu/op\tours cs/op\tfio cs/op\tours on IRQ CPU\tfio on IRQ CPU\t")
	for _, c := range r.Comparisons {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f [%.0f-%.0f]\t%.0f [%.0f-%.0f]\t%.3f\t%.0f\t%.0f\t%.2f\t%.2f\t%.3f\t%.3f\t%s\t%s\t\n",
			c.Backend, c.Threads, c.QD, c.OursIOPS, c.OursMin, c.OursMax, c.FioIOPS, c.FioMin, c.FioMax, c.Ratio, c.OursP99us, c.FioP99us, c.OursCPU, c.FioCPU,
			c.OursCS, c.FioCS, pct(c.OursOnIRQ), pct(c.FioOnIRQ))
	}
	tw.Flush()
	fmt.Fprintln(w, "(on IRQ CPU: share of the worker threads' operations (ours) or run time (fio) on the CPUs taking the device's completion interrupts; at low queue depth a thread elsewhere pays a cross-CPU wake-up per op, see docs/engine.md)")
	for _, c := range r.Comparisons {
		if c.QD <= 4 && c.OursOnIRQ >= 0 && c.FioOnIRQ >= 0 && math.Abs(c.OursOnIRQ-c.FioOnIRQ) >= 0.25 {
			fmt.Fprintf(w, "warning: %s %d thread(s) QD %d: ours ran %s on the completion-interrupt CPU, fio %s; the ratio measures where the scheduler put each tool; compare with --cpus auto\n",
				c.Backend, c.Threads, c.QD, pct(c.OursOnIRQ), pct(c.FioOnIRQ))
		}
	}
	seen := map[string]bool{}
	for _, c := range r.Comparisons {
		k := c.Backend + strings.Join(c.Matched, ",") + strings.Join(c.Notes, ",")
		if seen[k] {
			continue
		}
		seen[k] = true
		fmt.Fprintf(w, "fio options matched for %s: %s\n", c.Backend, strings.Join(c.Matched, ", "))
		for _, n := range c.Notes {
			fmt.Fprintf(w, "  differs: %s\n", n)
		}
	}
}
