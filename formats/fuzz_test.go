package formats

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fuzzTables returns the three table files of a small Synth bundle.
func fuzzTables(t testing.TB) map[string][]byte {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir, WithBatchRows(40))
	if err != nil {
		t.Fatal(err)
	}
	w.Manifest().Host = Host{KernelRelease: "fuzz", CPUs: 1, PageSize: 4096}
	w.Manifest().Timing.ServiceTimes = true
	w.AddFile(File{ID: 1, Path: "/a", Size: 4096 * 100, Mode: ModeRegular})
	w.AddFile(File{ID: 2, Path: "/bb", Size: 4096, Ino: 7})
	w.AddFile(File{ID: 3, Path: "/missing"}) // path-only
	kinds := []AccessKind{KindRead, KindFault, KindMmap, KindOpen, KindStat, KindExec}
	for i := 0; i < 100; i++ {
		a := Access{TS: uint64(i), PID: 1, TID: 2, Comm: "c" + strconv.Itoa(i/30), FileID: 1, FirstPage: uint64(i), NPages: 1, Kind: kinds[i%len(kinds)],
			EndNS: uint64(i) + 1, Op: uint64(i/2 + 1), Ret: 4096}
		switch {
		case a.Kind.Mapping():
			a.Prot, a.MapFirstPage, a.MapPages = ProtRead|ProtExec, 0, 100
		case a.Kind.Metadata():
			a.NPages, a.FirstPage, a.Ret = 0, 0, 3
		}
		if a.Kind == KindOpen && i%4 == 0 {
			a.FileID, a.Ret = 3, -2
		}
		w.Append(&a)
	}
	for i := 0; i < 5; i++ {
		w.AppendHint(&Hint{TS: uint64(i), Kind: HintTreeChildEnter, FileID: 1, Children: []uint64{1, 2, 3}, Name: "n", TID: 9, Source: []string{HintSourceApp, "adapter:sqlite"}[i%2]})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, n := range []string{FilesFile, AccessesFile, HintsFile, ManifestFile} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// readAllTables decodes data as each of the three tables, through this
// package's cursors and through arrow-go (as OpenTable does), with and
// without integrity checks (without them, corrupt bytes reach the decoders).
// Errors are expected; panics and huge allocations are bugs.
func readAllTables(data []byte) {
	for _, verify := range []bool{true, false} {
		for _, name := range []string{FilesFile, AccessesFile, HintsFile} {
			readTable(data, name, tableOpts{verify: verify})
		}
	}
	// A killed writer's file: scan as a stream.
	scanStream(data, AccessesFile)
	scanStream(data, HintsFile)
}

func readTable(data []byte, name string, o tableOpts) {
	tf, err := newTableFileBytes(data, name, o)
	if err != nil {
		return
	}
	switch name {
	case FilesFile:
		readFiles(tf, ModeRegular)
	case AccessesFile:
		if c, err := newAccessCursor(tf); err == nil {
			c.withKindName = true
			for c.Next() {
			}
		}
		if ab, err := newAccessBatches(tf, AllAccessColumns); err == nil {
			var dst AccessBatch
			for i := range ab.Len() {
				ab.Read(i, &dst)
			}
		}
	case HintsFile:
		if c, err := newHintCursor(tf); err == nil {
			for c.Next() {
			}
		}
	}
	if tf.checkArrowSafe() != nil {
		return
	}
	fr, err := newArrowReader(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		return
	}
	t := &Table{tf: tf, fr: fr, dec: tf.newDecoder()}
	for i := 0; i < t.NumBatches(); i++ {
		if rec, err := t.Batch(i); err == nil {
			rec.Release()
		}
	}
	fr.Close()
}

// FuzzReadTable feeds arbitrary bytes to the table readers: truncated
// files, flipped bytes, wrong schemas and huge declared lengths must give
// errors, never panics or multi-GiB allocations.
func FuzzReadTable(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A watchdog turns a hang into a crash the fuzzer records.
		done := make(chan struct{})
		go func() {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				panic(fmt.Sprintf("reading %d bytes hangs", len(data)))
			}
		}()
		readAllTables(data)
		close(done)
	})
}

// FuzzManifest feeds arbitrary bytes to the manifest parser.
func FuzzManifest(f *testing.F) {
	f.Add(fuzzTables(f)[ManifestFile])
	f.Add([]byte(`{"format_version":"9.0.0"}`))
	f.Add([]byte(`{"format_version":"1.0.0","counters":{"events":-1}}`))
	f.Add([]byte(`{"format_version":"1.1.0","timing":{"service_times":true,"first_start_ns":5,"last_end_ns":3},"recording":{"adapters":["sqlite"],"kernel":"6.18.0"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseManifest(data, ManifestFile)
		if err == nil {
			checkVersion(m.FormatVersion)
		}
	})
}

// fuzzSeeds returns valid tables and damaged variants of them.
func fuzzSeeds(t testing.TB) [][]byte {
	tabs := fuzzTables(t)
	var seeds [][]byte
	for _, n := range []string{FilesFile, AccessesFile, HintsFile} {
		b := tabs[n]
		seeds = append(seeds, b, b[:len(b)/2], b[:len(b)-1])
		flipped := bytes.Clone(b)
		flipped[len(b)/3] ^= 0x5a
		seeds = append(seeds, flipped)
	}
	// A huge declared uncompressed length in the first compressed buffer of
	// the first accesses batch.
	if huge := hugeLength(tabs[AccessesFile]); huge != nil {
		seeds = append(seeds, huge)
	}
	// A files table presented as accesses (wrong schema) is covered by
	// readAllTables trying every table name.
	return seeds
}

// hugeLength returns a copy of an accesses table whose first batch declares
// a 1 TiB uncompressed buffer.
func hugeLength(b []byte) []byte {
	tf, err := newTableFileBytes(b, AccessesFile, tableOpts{})
	if err != nil || len(tf.batches) == 0 {
		return nil
	}
	m, err := readMessage(b, int(tf.batches[0].off))
	if err != nil {
		return nil
	}
	dec := newBatchDecoder()
	if dec.load(m.hdr, m.body) != nil {
		return nil
	}
	out := bytes.Clone(b)
	bodyStart := int(tf.batches[0].off) + int(tf.batches[0].metaLen)
	for _, bm := range dec.bufs {
		if bm.len >= 8 {
			binary.LittleEndian.PutUint64(out[bodyStart+int(bm.off):], 1<<40)
			return out
		}
	}
	return nil
}

// TestFuzzSeedCorpus checks that the checked-in seed corpus is what
// fuzzSeeds generates now; PREDICTIO_WRITE_FUZZ_SEEDS=1 rewrites it.
func TestFuzzSeedCorpus(t *testing.T) {
	regen := os.Getenv("PREDICTIO_WRITE_FUZZ_SEEDS") == "1"
	check := func(target string, i int, b []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		path := filepath.Join(dir, fmt.Sprintf("seed%02d", i))
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
		if regen {
			os.MkdirAll(dir, 0o755)
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != body {
			t.Errorf("%s is missing or stale (%v); regenerate with PREDICTIO_WRITE_FUZZ_SEEDS=1 go test -run TestFuzzSeedCorpus ./formats", path, err)
		}
	}
	for i, s := range fuzzSeeds(t) {
		check("FuzzReadTable", i, s)
	}
	check("FuzzManifest", 0, fuzzTables(t)[ManifestFile])
}

// TestFuzzSeedsDoNotPanic runs the seeds and a sweep of truncations and
// byte flips in ordinary test runs.
func TestFuzzSeedsDoNotPanic(t *testing.T) {
	for _, s := range fuzzSeeds(t) {
		readAllTables(s)
	}
	b := fuzzTables(t)[AccessesFile]
	for n := 0; n < len(b); n += 7 {
		readAllTables(b[:n])
	}
	for i := 0; i < len(b); i += 5 {
		c := bytes.Clone(b)
		c[i] ^= 0xff
		readAllTables(c)
	}
}
