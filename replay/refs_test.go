package replay

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
)

// TestLoadRefusesMissingFiles: a bundle whose accesses reference a file
// that files.arrow lacks (a killed recorder's, issue 17) is refused with the
// count and what to do; the rows are not skipped silently.
func TestLoadRefusesMissingFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := formats.Create(dir, formats.AllowUnknownFiles())
	if err != nil {
		t.Fatal(err)
	}
	w.AddFile(formats.File{ID: 1, Ino: 1, Path: "/a", Size: 1 << 20})
	for i := 0; i < 100; i++ {
		w.Append(&formats.Access{TS: uint64(1000 + i), FileID: 1 + uint32(i%2)*6, FirstPage: uint64(i), NPages: 1, Kind: formats.KindRead})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Materialize(dir, filepath.Join(t.TempDir(), "files"))
	var mf *formats.MissingFilesError
	if !errors.As(err, &mf) || mf.Accesses != 50 || mf.IDs != 1 || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "trace repair") {
		t.Fatalf("Materialize: %v; want a MissingFilesError for 50 accesses of 1 file naming the bundle and trace repair", err)
	}
}

// TestRecordedWallFromOps: the recorded wall that replay's timing error
// compares against spans the operations replay re-issues, also for a
// bundle whose manifest measured it over every row (recorded before
// 2026-12-06): a metadata block read 90 ms before the first access is not
// in it.
func TestRecordedWallFromOps(t *testing.T) {
	const ms = uint64(1e6)
	dir := filepath.Join(t.TempDir(), "b")
	w, err := formats.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.Manifest().Timing.ServiceTimes = true
	w.AddFile(formats.File{ID: 1, Dev: 5, Ino: 0xfc00000, Path: "/dev/vda", Size: 1 << 30, Mode: formats.ModeBlock | 0o660})
	w.AddFile(formats.File{ID: 2, Dev: 0xfc00000, Ino: 12, Path: "/a", Size: 1 << 20, Mode: 0o100644})
	t0 := uint64(1e9)
	w.Append(&formats.Access{TS: t0, FileID: 1, FirstPage: 77, NPages: 1, Kind: formats.KindCacheAdd, PID: 3, TID: 3})
	w.Append(&formats.Access{TS: t0 + 90*ms, EndNS: t0 + 91*ms, FileID: 2, NPages: 1, Kind: formats.KindRead, Op: 1, PID: 3, TID: 4})
	w.Append(&formats.Access{TS: t0 + 92*ms, EndNS: t0 + 95*ms, FileID: 2, FirstPage: 9, NPages: 1, Kind: formats.KindRead, Op: 2, PID: 3, TID: 5})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// As an older recorder wrote it: from the block's row.
	mf := filepath.Join(dir, formats.ManifestFile)
	raw, err := os.ReadFile(mf)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["timing"].(map[string]any)["first_start_ns"] = t0
	m["timing"].(map[string]any)["recorded_wall_ns"] = 95 * ms
	if raw, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mf, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := loadTrace(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if tr.recordedWall != 5*ms {
		t.Fatalf("recorded wall %d ns, want 5 ms: the first read's start to the last read's end", tr.recordedWall)
	}
}
