package eval

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// goBench runs predictio's own Go benchmarks (the code behind
// docs/BENCHMARKS.md) as compiled test binaries, so that eval measures
// exactly what those benchmarks measure rather than a copy of them.
type goBench struct {
	root string // module root
	bin  string // directory of the compiled test binaries
	goc  string // the go command
	// list caches each package's benchmark names.
	list map[string][]string
}

// errNoSource says why goBench cannot run.
var errNoSource = errors.New("needs the predictio source tree (run predictio eval from a clone, or from below it) and the Go toolchain (scripts/setup.sh)")

// newGoBench finds the module root (from the working directory or the
// executable upwards) and the go command.
func newGoBench(workDir string) (*goBench, error) {
	root := findModuleRoot()
	if root == "" {
		return nil, errNoSource
	}
	goc, err := exec.LookPath("go")
	if err != nil {
		if _, serr := os.Stat("/usr/local/go/bin/go"); serr != nil {
			return nil, errNoSource
		}
		goc = "/usr/local/go/bin/go"
	}
	bin := filepath.Join(workDir, "control", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	return &goBench{root: root, bin: bin, goc: goc, list: map[string][]string{}}, nil
}

const modulePath = "github.com/predictio/predictio"

func findModuleRoot() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, d := range starts {
		for {
			b, err := os.ReadFile(filepath.Join(d, "go.mod"))
			if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "module "+modulePath+"\n") {
				return d
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return ""
}

// build compiles the test binary of package pkg ("record", "policies").
func (g *goBench) build(ctx context.Context, pkg string) (string, error) {
	out := filepath.Join(g.bin, strings.ReplaceAll(pkg, "/", "_")+".test")
	cmd := exec.CommandContext(ctx, g.goc, "test", "-c", "-o", out, "./"+pkg)
	cmd.Dir = g.root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the %s benchmarks: %v: %s", pkg, err, bytes.TrimSpace(b))
	}
	return out, nil
}

// has reports whether pkg has a benchmark named name (top level), building
// its test binary if needed. A package that does not exist has none.
func (g *goBench) has(ctx context.Context, pkg, name string) bool {
	names, ok := g.list[pkg]
	if !ok {
		if _, err := os.Stat(filepath.Join(g.root, pkg)); err == nil {
			if bin, err := g.build(ctx, pkg); err == nil {
				cmd := exec.CommandContext(ctx, bin, "-test.list", "^Benchmark")
				cmd.Dir = filepath.Join(g.root, pkg)
				if b, err := cmd.Output(); err == nil {
					names = strings.Fields(string(b))
				}
			}
		}
		g.list[pkg] = names
	}
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// find returns the first of pkgs that has benchmark name, or "".
func (g *goBench) find(ctx context.Context, name string, pkgs ...string) string {
	for _, p := range pkgs {
		if g.has(ctx, p, name) {
			return p
		}
	}
	return ""
}

// run runs the benchmarks of pkg matching pattern (a -test.bench
// regexp) with extra flags, in the package's directory, and returns the
// metrics of each benchmark line by its name (the -N CPU suffix cut).
func (g *goBench) run(ctx context.Context, pkg, pattern string, flags ...string) (map[string]map[string]float64, error) {
	bin := filepath.Join(g.bin, strings.ReplaceAll(pkg, "/", "_")+".test")
	args := append([]string{"-test.run", "^$", "-test.bench", pattern}, flags...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = filepath.Join(g.root, pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run %s benchmarks %s: %v: %s", pkg, pattern, err, tail(append(out, stderr.Bytes()...), 400))
	}
	res := parseBench(out)
	if len(res) == 0 {
		if i := bytes.Index(out, []byte("--- SKIP")); i >= 0 {
			return nil, fmt.Errorf("%w: %s: %s", ErrNotRun, pattern, tail(out[i:], 300))
		}
		return nil, fmt.Errorf("run %s benchmarks %s: no benchmark ran: %s", pkg, pattern, tail(append(out, stderr.Bytes()...), 400))
	}
	return res, nil
}

// parseBench reads `go test -bench` output lines: name, iterations, then
// value-unit pairs. Units become metric names: "events/s" is
// events_per_s, "drop%" drop_pct, "ns/op" ns_per_op.
func parseBench(out []byte) map[string]map[string]float64 {
	res := map[string]map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		m := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			m[unitName(f[i+1])] = v
		}
		res[name] = m
	}
	return res
}

func unitName(u string) string {
	r := strings.NewReplacer("/", "_per_", "%", "_pct", "-", "_", "µ", "u", ".", "_")
	return strings.Trim(r.Replace(u), "_")
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}
