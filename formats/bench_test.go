package formats

import (
	"bufio"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// cpuSeconds returns the process's user plus system CPU time. Benchmarks
// report rows per CPU-second beside rows per wall-second, because the
// shared 2-core machine is often loaded by other work.
func cpuSeconds() float64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// benchDir returns a directory on a disk file system (not tmpfs).
func benchDir(b *testing.B) string {
	d, err := os.MkdirTemp("/var/tmp", "predictio-formats-bench-")
	if err != nil {
		d = b.TempDir()
	} else {
		b.Cleanup(func() { os.RemoveAll(d) })
	}
	return d
}

// seqRows returns n access rows of a sequential scan with jittered
// timestamps, as Synth "seq" writes them, and a few comm values.
func seqRows(n int) []Access {
	r := rand.New(rand.NewSource(1))
	out := make([]Access, n)
	ts := uint64(synthStartNS)
	for i := range out {
		ts += 2000 + uint64(r.Int63n(500))
		out[i] = Access{TS: ts, PID: 4242, TID: 4242 + uint32(i/100000%4), Comm: "scan", FileID: 1, FirstPage: uint64(i), NPages: 1, Kind: KindRead}
	}
	return out
}

// BenchmarkWriteAccesses measures Writer.Append plus the share of Close, one
// row per op, for sequential-scan rows and for "mixed" rows (see mixedRows).
func BenchmarkWriteAccesses(b *testing.B) {
	for _, tc := range []struct {
		name string
		rows []Access
	}{{"seq", seqRows(1 << 20)}, {"mixed", mixedRows(1 << 20)}} {
		b.Run(tc.name, func(b *testing.B) { benchWrite(b, tc.rows) })
	}
}

func benchWrite(b *testing.B, rows []Access) {
	dir := filepath.Join(benchDir(b), "w")
	w, err := Create(dir)
	if err != nil {
		b.Fatal(err)
	}
	addBenchFiles(w)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for i := 0; i < b.N; i++ {
		a := &rows[i&(len(rows)-1)]
		if err := w.Append(a); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/(cpuSeconds()-cpu0), "rows/cpu-s")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	st, _ := os.Stat(filepath.Join(dir, AccessesFile))
	b.ReportMetric(float64(st.Size())/float64(b.N), "B/row")
}

// addBenchFiles adds the 16 files the benchmark rows read.
func addBenchFiles(w *Writer) {
	for id := uint32(1); id <= 16; id++ {
		w.AddFile(File{ID: id, Ino: uint64(id), Path: "/bench/" + strconv.Itoa(int(id)), Size: 1 << 40, Mode: ModeRegular})
	}
}

var (
	readBundleOnce sync.Once
	readBundleDirs map[string]string
	readBundleErr  error
)

// mixedRows returns n rows of 8 threads of 2 processes with 3 comm values
// reading 16 files at random: no column is constant within a batch.
func mixedRows(n int) []Access {
	r := rand.New(rand.NewSource(2))
	out := make([]Access, n)
	ts := uint64(synthStartNS)
	comms := []string{"postgres", "pg_worker", "backup"}
	for i := range out {
		ts += 2000 + uint64(r.Int63n(500))
		tid := uint32(r.Intn(8))
		out[i] = Access{TS: ts, PID: 100 + tid/4, TID: 1000 + tid, Comm: comms[tid%3], FileID: uint32(r.Intn(16)) + 1,
			FirstPage: uint64(r.Int63n(1 << 18)), NPages: uint32(1 + r.Intn(32)), Kind: AccessKind(1 + r.Intn(6))}
	}
	return out
}

// BenchmarkReadAccesses measures the AccessCursor, one row per op, over a
// 4 Mi-row Synth "seq" bundle (one thread: pid, tid, comm, file, npages and
// kind are constant) and a 4 Mi-row "mixed" one where no column is, with
// the integrity checks (verified: CRC32C of each batch) and without them
// (unverified: NoVerify). The difference in ns/op is the cost of the check
// per row.
func BenchmarkReadAccesses(b *testing.B) {
	readBundles(b)
	for _, name := range []string{"seq", "mixed"} {
		b.Run(name+"/verified", func(b *testing.B) { benchRead(b, readBundleDirs[name]) })
		b.Run(name+"/unverified", func(b *testing.B) { benchRead(b, readBundleDirs[name], NoVerify()) })
	}
}

// BenchmarkCheckReferences measures Bundle.CheckReferences, which simulate
// and replay run before they read a bundle, over the same bundles; one op is
// one row (it scans whole bundles until b.N rows, see ns/row).
func BenchmarkCheckReferences(b *testing.B) {
	readBundles(b)
	for _, name := range []string{"seq", "mixed"} {
		b.Run(name, func(b *testing.B) {
			bun, err := Open(readBundleDirs[name])
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			rows := 0 // one op is one row: whole scans until b.N rows
			for rows < b.N {
				if err := bun.CheckReferences(); err != nil {
					b.Fatal(err)
				}
				rows += 4 << 20
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
		})
	}
}

// readBundles writes the read benchmarks' bundles once.
func readBundles(b *testing.B) {
	readBundleOnce.Do(func() {
		d, err := os.MkdirTemp("/var/tmp", "predictio-formats-read-")
		if err != nil {
			readBundleErr = err
			return
		}
		readBundleDirs = map[string]string{"seq": filepath.Join(d, "seq"), "mixed": filepath.Join(d, "mixed")}
		if readBundleErr = Synth(readBundleDirs["seq"], SynthSpec{Pattern: "seq", Events: 4 << 20}); readBundleErr != nil {
			return
		}
		w, err := Create(readBundleDirs["mixed"])
		if err != nil {
			readBundleErr = err
			return
		}
		addBenchFiles(w)
		rows := mixedRows(4 << 20)
		for i := range rows {
			w.Append(&rows[i])
		}
		readBundleErr = w.Close()
	})
	if readBundleErr != nil {
		b.Fatal(readBundleErr)
	}
}

func benchRead(b *testing.B, dir string, opts ...OpenOption) {
	bun, err := Open(dir, opts...)
	if err != nil {
		b.Fatal(err)
	}
	c, err := bun.Accesses()
	if err != nil {
		b.Fatal(err)
	}
	var sum uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for i := 0; i < b.N; i++ {
		if !c.Next() {
			if c.Err() != nil {
				b.Fatal(c.Err())
			}
			c.Close()
			if c, err = bun.Accesses(); err != nil {
				b.Fatal(err)
			}
			c.Next()
		}
		sum += c.At().FirstPage
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/(cpuSeconds()-cpu0), "rows/cpu-s")
	c.Close()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	if sum == 1 {
		b.Log(sum)
	}
}

// BenchmarkBundleSize writes 10 M-event Synth bundles and reports bytes per
// event on disk, beside fio iolog v3 text for the same events (plain, gzip
// and zstd) and raw blktrace (48 bytes per record, the size of struct
// blk_io_trace without payload). Each op writes one bundle.
func BenchmarkBundleSize(b *testing.B) {
	for _, p := range []string{"seq", "random"} {
		b.Run(p, func(b *testing.B) {
			const events = 10_000_000
			for i := 0; i < b.N; i++ {
				dir := filepath.Join(benchDir(b), "s")
				if err := Synth(dir, SynthSpec{Pattern: p, Events: events}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				total := dirSize(b, dir)
				plain, gz, zs := iologSizes(b, dir)
				b.ReportMetric(float64(total)/events, "B/event")
				b.ReportMetric(float64(plain)/events, "iolog-B/event")
				b.ReportMetric(float64(gz)/events, "iolog.gz-B/event")
				b.ReportMetric(float64(zs)/events, "iolog.zst-B/event")
				b.ReportMetric(48, "blktrace-B/event")
				os.RemoveAll(dir)
				b.StartTimer()
			}
		})
	}
}

func dirSize(b *testing.B, dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			b.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// iologSizes renders the bundle's accesses as a fio iolog v3 file
// (timestamps in ns from the first event, byte offsets and lengths) and
// returns its size plain, gzip'd (level 6) and zstd'd (default level).
func iologSizes(b *testing.B, dir string) (plain, gz, zs int64) {
	bun, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	files, err := bun.Files()
	if err != nil {
		b.Fatal(err)
	}
	names := map[uint32]string{}
	var cp, cg, cz countWriter
	gw, _ := gzip.NewWriterLevel(&cg, 6)
	zw, _ := zstd.NewWriter(&cz, zstd.WithEncoderConcurrency(1))
	bw := bufio.NewWriterSize(io.MultiWriter(&cp, gw, zw), 1<<20)
	bw.WriteString("fio version 3 iolog\n")
	for _, f := range files {
		names[f.ID] = f.Path
		fmt.Fprintf(bw, "0 %s add\n0 %s open\n", f.Path, f.Path)
	}
	c, err := bun.Accesses()
	if err != nil {
		b.Fatal(err)
	}
	start := bun.Manifest().Start.MonotonicNS
	var line []byte
	var last uint64
	for c.Next() {
		a := c.At()
		line = strconv.AppendUint(line[:0], a.TS-start, 10)
		line = append(line, ' ')
		line = append(line, names[a.FileID]...)
		line = append(line, " read "...)
		line = strconv.AppendUint(line, a.FirstPage*synthPageSize, 10)
		line = append(line, ' ')
		line = strconv.AppendUint(line, uint64(a.NPages)*synthPageSize, 10)
		line = append(line, '\n')
		bw.Write(line)
		last = a.TS - start
	}
	c.Close()
	for _, f := range files {
		fmt.Fprintf(bw, "%d %s close\n", last, f.Path)
	}
	bw.Flush()
	gw.Close()
	zw.Close()
	return cp.n, cg.n, cz.n
}
