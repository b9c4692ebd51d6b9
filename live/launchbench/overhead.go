package launchbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Overhead is the daemon's cost on one unrelated workload: the workload's
// figure with the daemon stopped and running, alternating.
type Overhead struct {
	Workload string    `json:"workload"`
	Unit     string    `json:"unit"`
	Off      []float64 `json:"off"`
	On       []float64 `json:"on"`
	// Slowdown is how much slower the median is with the daemon running
	// (positive: slower).
	Slowdown float64 `json:"slowdown"`
}

// OverheadConfig configures RunOverhead.
type OverheadConfig struct {
	Bin      string
	Work     string
	Rounds   int           // alternating off/on pairs; 0 means 5
	Duration time.Duration // of one pread measurement; 0 means 3 s
	Compiles int           // gcc runs of one compile measurement; 0 means 20
	Log      io.Writer
}

// RunOverhead measures the daemon's cost on a hot pread loop (4 KiB
// random reads of a cached 64 MiB file, in this process) and on a compile
// (gcc -O2 of a C file, Compiles times), neither of which the daemon
// learns: its configuration names only python programs, and excludes
// the compiler's. The daemon runs with the profiles of the launch
// benchmark's directory when there are some.
func RunOverhead(ctx context.Context, cfg OverheadConfig) ([]Overhead, error) {
	if cfg.Rounds <= 0 {
		cfg.Rounds = 5
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Compiles <= 0 {
		cfg.Compiles = 20
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	b := &bench{cfg: Config{Bin: cfg.Bin, Work: cfg.Work, MetricsAddr: "127.0.0.1:9479", Log: cfg.Log}}
	dir := filepath.Join(cfg.Work, "overhead")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := writeC(dir); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "hot.dat")
	if err := writeHot(data, 64<<20); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("profile_dir = %q\nsocket = %q\nmetrics = %q\n[learn]\nprograms = [\"python3*\", \"node\", \"sqlite3\"]\nexclude = [\"gcc*\", \"cc1\", \"as\", \"ld*\", \"collect2\"]\n",
		filepath.Join(cfg.Work, "daemon-profiles"), filepath.Join(cfg.Work, "daemon.sock"), b.cfg.MetricsAddr)
	if err := os.WriteFile(filepath.Join(cfg.Work, "daemon-overhead.toml"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	pread := Overhead{Workload: "hot pread loop (4 KiB random reads of a cached 64 MiB file)", Unit: "reads/s"}
	compile := Overhead{Workload: fmt.Sprintf("compile (gcc -O2 -c, %d times)", cfg.Compiles), Unit: "s"}
	for r := range cfg.Rounds {
		for _, on := range [][]bool{{false, true}, {true, false}}[r%2] {
			if on {
				if err := b.startDaemonConfig("daemon-overhead.toml"); err != nil {
					return nil, err
				}
			}
			rate, err := preadLoop(data, cfg.Duration)
			if err == nil {
				var secs float64
				secs, err = compiles(ctx, dir, cfg.Compiles)
				add(&compile, on, secs)
			}
			add(&pread, on, rate)
			if on {
				b.stopDaemon()
			}
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(cfg.Log, "overhead round %d daemon %-5v pread %.0f reads/s, compile %.2f s\n", r, on, last(&pread, on), last(&compile, on))
		}
	}
	pread.Slowdown = 1 - median(pread.On)/median(pread.Off)
	compile.Slowdown = median(compile.On)/median(compile.Off) - 1
	return []Overhead{pread, compile}, nil
}

func add(o *Overhead, on bool, v float64) {
	if on {
		o.On = append(o.On, v)
	} else {
		o.Off = append(o.Off, v)
	}
}

func last(o *Overhead, on bool) float64 {
	s := o.Off
	if on {
		s = o.On
	}
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return quantile(s, 0.5)
}

// writeHot makes a file of size bytes and reads it into the page cache.
func writeHot(path string, size int) error {
	if st, err := os.Stat(path); err != nil || st.Size() != int64(size) {
		buf := make([]byte, 1<<20)
		for i := range buf {
			buf[i] = byte(i)
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		for n := 0; n < size; n += len(buf) {
			if _, err := f.Write(buf); err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
	}
	_, err := os.ReadFile(path)
	return err
}

// preadLoop reads random cached 4 KiB pages of path for d and returns the
// reads per second.
func preadLoop(path string, d time.Duration) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, _ := f.Stat()
	pages := st.Size() / 4096
	buf := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	fd := int(f.Fd())
	n := 0
	start := time.Now()
	for {
		for range 1024 {
			if _, err := unix.Pread(fd, buf, rng.Int64N(pages)*4096); err != nil {
				return 0, err
			}
		}
		n += 1024
		if el := time.Since(start); el >= d {
			return float64(n) / el.Seconds(), nil
		}
	}
}

// compiles runs gcc -O2 -c over dir's prog.c n times and returns the
// seconds it took.
func compiles(ctx context.Context, dir string, n int) (float64, error) {
	start := time.Now()
	for i := range n {
		args := []string{"gcc", "-O2", "-c", filepath.Join(dir, "prog.c"), "-o", filepath.Join(dir, "prog"+strconv.Itoa(i%2)+".o")}
		if _, err := runCmd(ctx, args, dir); err != nil {
			return 0, fmt.Errorf("bench launch: compile: %w", err)
		}
	}
	return time.Since(start).Seconds(), nil
}

func writeOverhead(w io.Writer, os []Overhead) {
	fmt.Fprintln(w, "\n| unrelated workload | daemon off (median, min–max) | daemon on (median, min–max) | slowdown |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, o := range os {
		f := func(v []float64) string {
			s := slices.Clone(v)
			slices.Sort(s)
			if len(s) == 0 {
				return "—"
			}
			return fmt.Sprintf("%s %s (%s–%s)", num(quantile(s, 0.5)), o.Unit, num(s[0]), num(s[len(s)-1]))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %+.2f%% |\n", o.Workload, f(o.Off), f(o.On), 100*o.Slowdown)
	}
}

func num(v float64) string {
	if v >= 1000 {
		return strings.TrimSuffix(fmt.Sprintf("%.0f", v), ".0")
	}
	return fmt.Sprintf("%.3f", v)
}
