package simulate

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/predictio/predictio/formats"
)

// TestOpenInputRefusesMissingFiles: a bundle whose accesses reference a
// file that files.arrow lacks (a killed recorder's, issue 17) is refused
// with the count and what to do, not simulated without file sizes.
func TestOpenInputRefusesMissingFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := formats.Create(dir, formats.AllowUnknownFiles())
	if err != nil {
		t.Fatal(err)
	}
	w.AddFile(formats.File{ID: 1, Ino: 1, Path: "/a", Size: 1 << 20})
	for i := 0; i < 100; i++ {
		// The second half reads file 7, which has no row.
		w.Append(&formats.Access{TS: uint64(1000 + i), FileID: 1 + uint32(i/50)*6, FirstPage: uint64(i), NPages: 1, Kind: formats.KindRead})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = OpenInput(dir)
	var mf *formats.MissingFilesError
	if !errors.As(err, &mf) || mf.Accesses != 50 || mf.IDs != 1 || mf.FirstTS != 1050 ||
		!strings.Contains(err.Error(), "trace repair") || !strings.Contains(err.Error(), "trace slice") {
		t.Fatalf("OpenInput: %v; want a MissingFilesError for 50 accesses of 1 file from ts_ns 1050, naming trace repair and trace slice", err)
	}
}
