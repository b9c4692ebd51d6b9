package source

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestScanMaps(t *testing.T) {
	exe, _ := os.Executable()
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	got := scanMaps("/proc/self/maps", statKey(&st))
	if got != exe {
		t.Errorf("scanMaps found %q, want %q", got, exe)
	}
}

// TestBlockDevice: the page cache key of a block device's cached blocks
// (its bdev inode: an anonymous superblock, the device's dev_t as inode
// number) resolves to /dev/NAME with the device's size, and the file
// table keeps it, whatever the include filter and the default /dev
// exclude, unless the user excludes it.
func TestBlockDevice(t *testing.T) {
	ents, err := os.ReadDir("/sys/dev/block")
	if err != nil || len(ents) == 0 {
		t.Fatalf("no block device in /sys/dev/block (%v): the recorder needs one to record from", err)
	}
	var maj, min uint64
	if _, err := fmt.Sscanf(ents[0].Name(), "%d:%d", &maj, &min); err != nil {
		t.Fatal(err)
	}
	name, _ := os.Readlink("/sys/dev/block/" + ents[0].Name())
	key := fileKey{dev: 3, ino: maj<<20 | min}
	path, size, ok := blockDevice(key)
	if !ok || path != "/dev/"+filepath.Base(name) {
		t.Fatalf("blockDevice(%+v) = %q, %d, %v; want /dev/%s", key, path, size, ok, filepath.Base(name))
	}
	if _, _, ok := blockDevice(fileKey{dev: 254 << 20, ino: key.ino}); ok {
		t.Error("a file of a real filesystem whose inode number looks like a dev_t was taken for a block device")
	}
	for _, c := range []struct {
		exclude []string
		want    uint32
	}{{nil, stateAllowed}, {[]string{path}, stateDenied}} {
		filt := filter{include: []string{"/usr"}, exclude: append(append([]string{}, defaultExcludes...), c.exclude...)}
		tab := newFileTable(filt, nil, "")
		e := tab.add(key, 0, "")
		if got := e.state.Load(); got != c.want {
			t.Errorf("exclude %v: state %d, want %d", c.exclude, got, c.want)
		}
		f, _ := tab.rowNow(e.id)
		if f.Path != path || f.Mode&unix.S_IFMT != unix.S_IFBLK || f.Size != size {
			t.Errorf("exclude %v: files row %+v, want %s, a block device of %d bytes", c.exclude, f, path, size)
		}
	}
}

// TestRowStatFresh: a file's row takes the stat the file was added with
// while it is younger than statFresh (a second stat of every file doubled
// the recorder's stats), and stats the file again after that.
func TestRowStatFresh(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	tab := newFileTable(filter{}, nil, "")
	e := tab.add(statKey(&st), 0, path)
	if err := os.WriteFile(path, make([]byte, 3*4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if f, _ := tab.rowNow(e.id); f.Size != 4096 || f.MtimeNS != st.Mtim.Nano() || f.Mode != st.Mode {
		t.Errorf("row within statFresh: %+v, want the stat at add (4096 bytes)", f)
	}
	tab.mu.Lock()
	e.addedAt -= statFresh
	tab.mu.Unlock()
	if f, _ := tab.rowNow(e.id); f.Size != 3*4096 {
		t.Errorf("row after statFresh: size %d, want 12288 (stat'ed again)", f.Size)
	}
}
