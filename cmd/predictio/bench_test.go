package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/predictio/predictio/bench"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/testenv"
	"github.com/predictio/predictio/simulate"
	"golang.org/x/sys/unix"
)

// benchCLI runs 'predictio bench ARGS' and returns its stdout and exit code.
func benchCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	code := commands["bench"].run(args)
	w.Close()
	os.Stdout = old
	return string(<-done), code
}

func benchScratch(t *testing.T) string {
	t.Helper()
	return testenv.ScratchDir(t, "bench-cli-", "/var/tmp and the temp dir are missing or tmpfs: no filesystem with O_DIRECT for the test")
}

func TestBenchCLIBadInput(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"engine", "--backend", "spdk"},
		{"engine", "--qd", "0"},
		{"engine", "--threads", "x"},
		{"engine", "--size", "1.5G"},
		{"engine", "--rw", "seqread"},
		{"engine", "--harvest", "sometimes"},
		{"device", "--size", "1M"},
		{"device", "--duration", "1ms"},
	} {
		if _, code := benchCLI(t, args...); code != 2 {
			t.Errorf("bench %v: exit %d, want 2", args, code)
		}
	}
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		f := filepath.Join("/dev/shm", "predictio-bench-cli")
		defer os.Remove(f)
		if _, code := benchCLI(t, "engine", "--file", f, "--size", "16M", "--backend", "psync", "--duration", "100ms"); code != 1 {
			t.Errorf("bench engine on tmpfs: exit %d, want 1", code)
		}
	}
}

func TestBenchEngineCLI(t *testing.T) {
	f := filepath.Join(benchScratch(t), "scratch")
	out, code := benchCLI(t, "engine", "--file", f, "--size", "16M", "--backend", "libaio,uring,uring-sqpoll-shared",
		"--qd", "4", "--threads", "1,2", "--duration", "150ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var rep struct {
		Points []map[string]any `json:"points"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	if len(rep.Points) != 6 {
		t.Fatalf("%d points, want 6", len(rep.Points))
	}
	for _, p := range rep.Points {
		for _, k := range []string{"backend", "threads", "qd", "iops", "p50_us", "p99_us", "syscalls_per_op", "mib_s", "p999_us", "cpu_us_per_op"} {
			if _, ok := p[k]; !ok {
				t.Fatalf("point lacks %q: %v", k, p)
			}
		}
		if p["iops"].(float64) <= 0 {
			t.Fatalf("point without IOPS: %v", p)
		}
	}
}

func TestBenchDeviceCLI(t *testing.T) {
	dir := benchScratch(t)
	t.Setenv(bench.ProfileCacheEnv, t.TempDir()) // not this machine's real cache
	out := filepath.Join(dir, "dev.json")
	if _, code := benchCLI(t, "device", "--file", filepath.Join(dir, "dev.dat"), "--size", "64M", "--duration", "450ms", "-o", out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var p formats.DeviceProfile
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Version != formats.DeviceProfileVersion || p.ReadLatencyNS == 0 || p.SeqReadBytesPerSec <= 0 || p.QueueDepth != 32 {
		t.Fatalf("profile %+v", p)
	}
	// The idle curve: one point a gap, ascending, each gap at least the
	// one asked for (a sleep never ends early), the last 30 ms.
	if len(p.Idle) != 9 || p.Idle[8].GapNS < 30e6 || p.Idle[8].GapNS > 60e6 {
		t.Fatalf("idle curve %+v, want 9 points up to about 30 ms", p.Idle)
	}
	for i, pt := range p.Idle {
		if pt.P50NS == 0 || i > 0 && pt.GapNS <= p.Idle[i-1].GapNS {
			t.Errorf("idle curve %+v: point %d", p.Idle, i)
		}
	}
	if _, err := simulate.DeviceFromProfile(&p); err != nil {
		t.Errorf("simulate refuses the profile: %v", err)
	}
	// It is cached for the device, for simulate and replay to find.
	c, err := bench.LookupProfile(dir)
	if err != nil {
		t.Fatalf("profile not cached: %v", err)
	}
	if c.Profile.ReadLatencyNS != p.ReadLatencyNS || !c.Profile.MeasuredAt.Equal(p.MeasuredAt) {
		t.Errorf("cached %+v, measured %+v", c.Profile, p)
	}
}
