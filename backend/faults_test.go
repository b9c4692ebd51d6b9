package backend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/predictio/predictio/internal/faultfs"
	"github.com/predictio/predictio/internal/testenv"
	"github.com/predictio/predictio/policies"
)

// faultFile serves a pages-page pattern file through faultfs, failing reads
// of pages [badFirst, badFirst+badN) with EIO.
func faultFile(t *testing.T, pages, badFirst, badN int, opt faultfs.Options) string {
	t.Helper()
	ps := os.Getpagesize()
	backing := filepath.Join(scratchDir(t), "backing")
	testenv.WritePattern(t, backing, pages*ps)
	fs := faultfs.MountT(t, []faultfs.File{{Name: "f", Backing: backing,
		Faults: []faultfs.Range{{Off: int64(badFirst * ps), Len: int64(badN * ps)}}}}, opt)
	return fs.Path("f")
}

// TestDirectReadErrors: O_DIRECT prefetch reads that fail with EIO are
// counted as failures, their slots are handed back with the error, and the
// good pages of the same request are read; Close reports no error.
func TestDirectReadErrors(t *testing.T) {
	path := faultFile(t, 64, 20, 4, faultfs.Options{DirectIO: true})
	reg := NewRegistry()
	defer reg.Close()
	if _, err := reg.Add(refOf(t, 1, path)); err != nil {
		t.Fatal(err)
	}
	c := &fakeCache{present: map[uint64]bool{}, full: 1 << 30, data: map[uint64][]byte{}}
	d, err := NewDirect(reg, c, DirectOptions{QueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	d.Submit(&policies.Request{File: 1, Ranges: []policies.Range{{First: 16, N: 12}}})
	rep, err := d.Close()
	if err != nil {
		t.Fatalf("close: %v", err)
	}
	if rep.Stats.Failures != 4 || c.errs != 4 || len(c.data) != 8 {
		t.Fatalf("failures %d, error fills %d, pages filled %d; want 4, 4, 8: %v", rep.Stats.Failures, c.errs, len(c.data), rep.Warnings)
	}
	if len(rep.Warnings) == 0 || !strings.Contains(rep.Warnings[0], "input/output error") {
		t.Errorf("warnings %q do not name the I/O error", rep.Warnings)
	}
}

// TestKernelReadErrors: readahead of a range whose reads fail is issued
// like any other (FADVISE reports no read errors: the kernel reads
// asynchronously and drops failed pages quietly), the backend closes
// without error, and a later demand read of the good pages succeeds.
func TestKernelReadErrors(t *testing.T) {
	path := faultFile(t, 64, 20, 4, faultfs.Options{})
	reg := NewRegistry()
	defer reg.Close()
	if _, err := reg.Add(refOf(t, 1, path)); err != nil {
		t.Fatal(err)
	}
	b := NewKernel(reg, Options{})
	b.Submit(&policies.Request{File: 1, Ranges: []policies.Range{{First: 16, N: 12}}})
	rep, err := b.Close()
	if err != nil || rep.Stats.PagesSubmitted != 12 {
		t.Fatalf("close: %v, %+v", err, rep.Stats)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, os.Getpagesize())
	if _, err := f.ReadAt(buf, 16*int64(len(buf))); err != nil {
		t.Fatalf("read of a good page after the prefetch: %v", err)
	}
	if _, err := f.ReadAt(buf, 21*int64(len(buf))); err == nil {
		t.Fatalf("read of a bad page succeeded: the fault is not injected")
	}
}
