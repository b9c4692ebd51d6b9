package blockdev

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAttrPartition reads a disk's attribute directly and through one of
// its partitions, in a sysfs tree laid out like the kernel's.
func TestAttrPartition(t *testing.T) {
	sys := t.TempDir()
	disk := filepath.Join(sys, "devices", "pci", "block", "sda")
	if err := os.MkdirAll(filepath.Join(disk, "sda1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(disk, "queue"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(disk, "queue", "max_sectors_kb"), []byte("1280\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	for dev, target := range map[string]string{"8:0": "../../devices/pci/block/sda", "8:1": "../../devices/pci/block/sda/sda1"} {
		if err := os.Symlink(target, filepath.Join(sys, "dev", "block", dev)); err != nil {
			t.Fatal(err)
		}
	}
	for _, minor := range []uint32{0, 1} {
		if v, err := Uint(sys, 8, minor, "queue/max_sectors_kb"); err != nil || v != 1280 {
			t.Errorf("8:%d queue/max_sectors_kb = %d, %v; want 1280", minor, v, err)
		}
	}
	if _, err := Attr(sys, 8, 2, "queue/max_sectors_kb"); !os.IsNotExist(err) {
		t.Errorf("missing device 8:2: %v, want not exist", err)
	}
}
