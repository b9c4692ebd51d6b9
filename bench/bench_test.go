package bench

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/predictio/predictio/internal/testenv"
	"golang.org/x/sys/unix"
)

func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		got := float64(h.Quantile(q))
		want := q * 100000 * 1e3
		if math.Abs(got-want)/want > 0.01 {
			t.Errorf("quantile %v = %v, want %v within 1%%", q, got, want)
		}
	}
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<40 + 12345} {
		i := histIndex(v)
		mid := histValue(i)
		if v >= 128 && math.Abs(float64(mid)-float64(v))/float64(v) > 1.0/128 {
			t.Errorf("value %d: bucket %d midpoint %d too far", v, i, mid)
		}
		if v < 128 && mid != v {
			t.Errorf("value %d not exact: %d", v, mid)
		}
	}
	if n := testing.AllocsPerRun(100, func() { h.Record(time.Millisecond) }); n != 0 {
		t.Errorf("Record allocates %v", n)
	}
}

func scratchDir(t testing.TB) string {
	t.Helper()
	return testenv.ScratchDir(t, "bench-test-", "/var/tmp and the temp dir are missing or tmpfs: no filesystem with O_DIRECT for the test")
}

func TestRefuseTmpfs(t *testing.T) {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm to test the refusal on")
	}
	path := filepath.Join("/dev/shm", "predictio-bench-test")
	defer os.Remove(path)
	err := PrepareScratch(path, 1<<20, io.Discard)
	if !errors.Is(err, ErrNoDirectIO) {
		t.Fatalf("PrepareScratch on tmpfs: %v, want ErrNoDirectIO", err)
	}
}

func TestBackendsSmall(t *testing.T) {
	path := filepath.Join(scratchDir(t), "scratch")
	const size = 16 << 20
	if err := PrepareScratch(path, size, io.Discard); err != nil {
		t.Fatal(err)
	}
	// Pull some pages into the cache: Run must notice and drop them.
	b := make([]byte, 1<<20)
	f, _ := os.Open(path)
	f.Read(b)
	f.Close()
	for _, tc := range []struct {
		backend, rw, harvest string
		threads, qd          int
	}{
		{Psync, "randread", "", 1, 1},
		{Libaio, "mix", "", 2, 8},
		{Uring, "randread", "wait", 1, 8},
		{Uring, "randwrite", "backoff", 1, 8},
		{UringSQPoll, "randread", "backoff", 1, 8},
		{UringShared, "mix", "wait", 2, 8},
	} {
		p := Point{Path: path, Size: size, Backend: tc.backend, RW: tc.rw, Threads: tc.threads, QD: tc.qd,
			Duration: 150 * time.Millisecond, FixedBufs: true, RegisterFiles: true, Harvest: tc.harvest, DeferTaskrun: true}
		r, err := Run(p)
		if err != nil {
			t.Fatalf("%s: %v", tc.backend, err)
		}
		t.Logf("%s %s: %.0f IOPS p50 %.0fus p99 %.0fus syscalls/op %.3f cpu %.1fus/op poller %.1fus/op cached %d",
			tc.backend, tc.rw, r.IOPS, r.P50us, r.P99us, r.Syscalls, r.CPUus, r.PollerCPUus, r.CachedPages)
		if r.Ops == 0 || r.Errors != 0 || r.P50us <= 0 || r.P99us < r.P50us {
			t.Fatalf("%s: implausible result %+v", tc.backend, r)
		}
		switch tc.backend {
		case Psync:
			if r.Syscalls != 1 {
				t.Errorf("psync: %.3f syscalls/op, want exactly 1", r.Syscalls)
			}
		case Libaio:
			if r.Syscalls < 2.0/8 || r.Syscalls > 3 {
				t.Errorf("libaio: %.3f syscalls/op", r.Syscalls)
			}
		case UringSQPoll, UringShared:
			if r.Pollers < 1 {
				t.Errorf("%s: no SQPOLL thread seen", tc.backend)
			}
		}
	}
	if n, _ := CachedPages(path, size); n != 0 {
		t.Errorf("%d pages cached after O_DIRECT runs", n)
	}
}

func TestMeasureDeviceShort(t *testing.T) {
	path := filepath.Join(scratchDir(t), "device")
	p, err := MeasureDevice(DeviceConfig{Path: path, Size: 64 << 20, Duration: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *p)
	if p.ReadLatencyNS == 0 || p.RandReadBytesPerSec <= 0 || p.SeqReadBytesPerSec <= 0 || p.QueueDepth != 32 || p.Version != 1 {
		t.Fatalf("implausible profile %+v", *p)
	}
	if p.ReadLatencyP99NS < p.ReadLatencyNS {
		t.Fatalf("p99 %d below p50 %d", p.ReadLatencyP99NS, p.ReadLatencyNS)
	}
}

func TestFioArgsAndParse(t *testing.T) {
	p := Point{Path: "/var/tmp/x", Size: 1 << 30, Backend: UringSQPoll, RW: "randread", Threads: 2, QD: 32,
		Duration: 5 * time.Second, FixedBufs: true, RegisterFiles: true}
	j, err := FioArgs(p)
	if err != nil {
		t.Fatal(err)
	}
	args := " " + strings.Join(j.Args, " ") + " "
	for _, want := range []string{" --ioengine=io_uring ", " --iodepth=32 ", " --numjobs=2 ", " --sqthread_poll=1 ", " --fixedbufs=1 ", " --registerfiles=1 ", " --direct=1 ", " --runtime=5 "} {
		if !strings.Contains(args, want) {
			t.Errorf("fio args lack %q: %s", want, args)
		}
	}
	out := []byte(`fio: some warning
{"fio version":"fio-3.33","jobs":[{"read":{"iops":1000.5,"total_ios":5002,"runtime":5000,
"lat_ns":{"percentile":{"50.000000":70000,"99.000000":200000,"99.900000":500000}}},
"write":{"iops":0,"total_ios":0,"runtime":0}}]}`)
	r, err := ParseFio(out, p)
	if err != nil {
		t.Fatal(err)
	}
	if r.IOPS != 1000.5 || r.P50us != 70 || r.P99us != 200 || r.P999us != 500 || r.Ops != 5002 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := ParseFio([]byte(`{"jobs":[]}`), p); err == nil {
		t.Fatal("empty fio output accepted")
	}
}
