package source

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/internal/tracetest"
)

// costRun runs the helper mode (tracetest: "pread" or "syscalls") for n
// calls and returns its thread's CPU ns per call: plain (src nil), as
// src's command (traced), or started beside src without being a target
// (untraced: what every other process pays while a source is attached).
func costRun(b *testing.B, mode, file string, n int, src *Source, traced bool) float64 {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "PREDICTIO_RECORD_HELPER="+mode, "PREDICTIO_RECORD_FILE="+file, "PREDICTIO_RECORD_N="+strconv.Itoa(n))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if traced {
		err = src.StartCommand(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	var wall, cpu float64
	if _, err := fmt.Sscan(out.String(), &wall, &cpu); err != nil {
		b.Fatalf("helper printed %q", out.String())
	}
	return cpu / float64(n)
}

// BenchmarkEventCost measures what the source's programs cost on the real
// path, by the CPU time of the traced thread (robust to other load on the
// machine, unlike wall time): a helper making 1 M 4 KiB preads of a
// cached 64 MiB file (each a read row), or 1 M getppid calls (no row),
// alternated round by round (7 rounds) between
//
//	plain     no source
//	untraced  a source attached, the helper no target: what every other
//	          process on the machine pays per system call
//	traced    the helper is the source's command
//
// It reports the medians of each (ns per call), traced − plain (the
// in-kernel cost per event in the traced thread) and untraced − plain,
// and traced / plain. A last traced run with the kernel's BPF run-time
// statistics on (BPF_ENABLE_STATS, which adds its own clock reads)
// reports each program's ns per run and runs per pread. With
// PREDICTIO_BPF_OBJECTS (see BenchmarkProgramCost) each object is
// measured in every round, and reports as a sub-benchmark of its own.
// Run with -benchtime=1x.
func BenchmarkEventCost(b *testing.B) {
	requireSource(b, "filemap:mm_filemap_get_pages")
	file := tracetest.WarmFile(b, tracetest.DiskDir(b), 64<<20)
	cache := b.TempDir()
	objects := []string{""}
	if o := os.Getenv("PREDICTIO_BPF_OBJECTS"); o != "" {
		objects = strings.Split(o, ",")
	}
	for _, mode := range []string{"pread", "syscalls"} {
		benchEventCost(b, mode, file, cache, objects)
	}
}

func benchEventCost(b *testing.B, mode, file, cache string, objects []string) {
	const n, rounds = 1_000_000, 7
	open := func(obj string) func() *Source {
		return func() *Source {
			src, err := Open(Config{Command: true, BTFCacheDir: cache, object: obj})
			if err != nil {
				b.Fatal(err)
			}
			if err := src.Start(ConsumerFunc(func(*Batch) error { return nil })); err != nil {
				b.Fatal(err)
			}
			return src
		}
	}
	var plain []float64
	untraced := make([][]float64, len(objects))
	traced := make([][]float64, len(objects))
	dropped := make([]uint64, len(objects))
	for r := range rounds {
		// plain, then each object untraced and traced; reversed every other round
		type run struct {
			obj    int
			traced bool
		}
		order := []run{{-1, false}}
		for k := range objects {
			order = append(order, run{k, false}, run{k, true})
		}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, o := range order {
			if o.obj < 0 {
				plain = append(plain, costRun(b, mode, file, n, nil, false))
				continue
			}
			src := open(objects[o.obj])()
			v := costRun(b, mode, file, n, src, o.traced)
			src.Stop()
			dropped[o.obj] += src.Stats().Dropped
			src.Close()
			if o.traced {
				traced[o.obj] = append(traced[o.obj], v)
			} else {
				untraced[o.obj] = append(untraced[o.obj], v)
			}
		}
	}
	p := medianOf(plain)
	for k, obj := range objects {
		name := "call=" + mode
		if obj != "" {
			name += "/object=" + strconv.Itoa(k)
		}
		b.Run(name, func(b *testing.B) {
			u, t := medianOf(untraced[k]), medianOf(traced[k])
			b.ReportMetric(p, "plain-ns/call")
			b.ReportMetric(u, "untraced-ns/call")
			b.ReportMetric(t, "traced-ns/call")
			b.ReportMetric(t-p, "traced-extra-ns/call")
			b.ReportMetric(u-p, "untraced-extra-ns/call")
			b.ReportMetric(t/p, "traced/plain")
			b.ReportMetric(float64(dropped[k]), "dropped")
			if mode == "pread" {
				for name, v := range progStats(b, open(obj), mode, file, n, true) {
					b.ReportMetric(v, name)
				}
			}
		})
	}
}

// BenchmarkProgramCost runs the helpers of BenchmarkEventCost, traced and
// untraced, with BPF run-time statistics on, and reports each program's
// ns per run and runs per call (the statistics' own clock reads
// included) and the helper's CPU per call: quick, for comparing program
// versions. PREDICTIO_BPF_OBJECTS names ELF objects to compare
// (comma-separated: record_x86_bpfel.o files of other versions, built
// against this loader's maps); they are alternated round by round (5
// rounds) and each reports the medians as a sub-benchmark of its own.
// Run with -benchtime=1x.
func BenchmarkProgramCost(b *testing.B) {
	requireSource(b, "filemap:mm_filemap_get_pages")
	file := tracetest.WarmFile(b, tracetest.DiskDir(b), 64<<20)
	cache := b.TempDir()
	objects := []string{""}
	rounds := 1
	if o := os.Getenv("PREDICTIO_BPF_OBJECTS"); o != "" {
		objects, rounds = strings.Split(o, ","), 5
	}
	for _, mode := range []string{"pread", "syscalls"} {
		for _, traced := range []bool{true, false} {
			// results[object][metric] over the rounds
			results := make([]map[string][]float64, len(objects))
			for r := range rounds {
				for i := range objects {
					k := i
					if r%2 == 1 {
						k = len(objects) - 1 - i
					}
					open := func() *Source {
						src, err := Open(Config{Command: true, BTFCacheDir: cache, object: objects[k]})
						if err != nil {
							b.Fatal(err)
						}
						if err := src.Start(ConsumerFunc(func(*Batch) error { return nil })); err != nil {
							b.Fatal(err)
						}
						return src
					}
					m := progStats(b, open, mode, file, 1_000_000, traced)
					if results[k] == nil {
						results[k] = map[string][]float64{}
					}
					for name, v := range m {
						results[k][name] = append(results[k][name], v)
					}
				}
			}
			for k, obj := range objects {
				name := fmt.Sprintf("call=%s/traced=%v", mode, traced)
				if obj != "" {
					name += "/object=" + strconv.Itoa(k)
				}
				b.Run(name, func(b *testing.B) {
					for metric, v := range results[k] {
						b.ReportMetric(medianOf(v), metric)
					}
				})
			}
		}
	}
}

// progStats runs the helper (traced or not) with BPF run-time statistics
// on and returns each program's ns per run and runs per call, the total
// BPF ns per call and the helper's CPU ns per call, as metrics.
func progStats(b *testing.B, open func() *Source, mode, file string, n int, traced bool) map[string]float64 {
	out := map[string]float64{}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Logf("no BPF run-time statistics: %v", err)
		return out
	}
	defer stats.Close()
	src := open()
	defer src.Close()
	before := map[string]*ebpf.ProgramStats{}
	for name, p := range src.coll.Programs {
		if st, err := p.Stats(); err == nil {
			before[name] = st
		}
	}
	out["stats-on-ns/call"] = costRun(b, mode, file, n, src, traced)
	src.Stop()
	var total float64
	for name, p := range src.coll.Programs {
		st, err := p.Stats()
		if err != nil || before[name] == nil {
			continue
		}
		runs := float64(st.RunCount - before[name].RunCount)
		if runs == 0 {
			continue
		}
		ns := float64(st.Runtime-before[name].Runtime) / runs
		total += ns * runs / float64(n)
		out[name+"-ns/run"] = ns
		out[name+"-runs/call"] = runs / float64(n)
	}
	out["bpf-ns/call"] = total
	return out
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
