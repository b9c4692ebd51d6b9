package replay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/testenv"
)

// sizedTrace is a trace whose replay touches one file of each size (bytes).
func sizedTrace(sizes ...uint64) *trace {
	t := &trace{dir: "mem", pageSize: formats.PageSize(), byID: map[uint32]*fileInfo{}}
	for i, s := range sizes {
		id := uint32(i + 1)
		f := &fileInfo{File: formats.File{ID: id, Path: fmt.Sprintf("/data/d%d/file%d.bin", i%4, i), Size: s, MtimeNS: 1_700_000_000_000_000_000}, accessed: true}
		t.files = append(t.files, f)
		t.byID[id] = f
	}
	return t
}

// TestMaterializeChecksSpace materializes onto a private 16 MiB ext4
// filesystem: files that do not fit together are refused before any is
// written, with the amounts in the error; files already there do not count.
func TestMaterializeChecksSpace(t *testing.T) {
	l := testenv.NewLoopFS(t, testenv.LoopOptions{Size: 16 << 20})
	dir := filepath.Join(l.Dir, "files")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free, bs := st.Bavail*uint64(st.Frsize), uint64(st.Frsize)

	// Two files that each fit, but not both: nothing may be written.
	half := free/2 + 1<<20
	_, err := materializeTrace(sizedTrace(half, half), dir)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("two files of %d bytes with %d free: %v, want ErrNoSpace", half, free, err)
	}
	want := fmt.Sprintf("needs %s for 2 files and has %s free", formatBytes(2*((half+bs-1)/bs*bs+bs)+2*bs), formatBytes(free))
	t.Logf("refused: %v", err)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name %s and say %q", err, dir, want)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "data"))
	if len(ents) != 0 {
		t.Errorf("refused, but %d entries were written under %s", len(ents), dir)
	}
	if got := uint64(l.Free(t)); got != free {
		t.Errorf("free space went from %d to %d bytes after a refusal", free, got)
	}

	// A file that fits is written; materializing it again keeps it, even
	// though a second copy would not fit.
	big := free * 2 / 3
	tr := sizedTrace(big)
	res, err := materializeTrace(tr, dir)
	if err != nil || res.Written != 1 || res.Bytes != big {
		t.Fatalf("one file of %d bytes with %d free: %+v, %v", big, free, res, err)
	}
	res, err = materializeTrace(tr, dir)
	if err != nil || res.Kept != 1 || res.Written != 0 {
		t.Fatalf("materialize again: %+v, %v; want the file kept", res, err)
	}
}

// TestMaterializeInodes refuses more files than the filesystem has inodes.
func TestMaterializeInodes(t *testing.T) {
	l := testenv.NewLoopFS(t, testenv.LoopOptions{Size: 4 << 20})
	var st unix.Statfs_t
	if err := unix.Statfs(l.Dir, &st); err != nil {
		t.Fatal(err)
	}
	sizes := make([]uint64, st.Ffree+1) // empty files: no data blocks
	_, err := materializeTrace(sizedTrace(sizes...), filepath.Join(l.Dir, "files"))
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "inodes") {
		t.Fatalf("%d files with %d free inodes: %v, want ErrNoSpace naming inodes", len(sizes), st.Ffree, err)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1900 << 20: "1.9 GiB", 512 << 20: "512.0 MiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
