// Package blockdev reads block-device attributes from sysfs.
package blockdev

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Attr reads attribute rel (such as "queue/max_sectors_kb" or
// "bdi/read_ahead_kb") of block device major:minor from the sysfs mounted
// at sysfs ("/sys"), trimmed. A partition has no queue or bdi of its own,
// so where the device lacks rel, Attr reads its disk's: the partition's
// sysfs directory sits inside the disk's, and the kernel resolves ".."
// after following the /sys/dev/block link.
func Attr(sysfs string, major, minor uint32, rel string) (string, error) {
	dev := filepath.Join(sysfs, "dev", "block", fmt.Sprintf("%d:%d", major, minor))
	b, err := os.ReadFile(dev + "/" + rel)
	if os.IsNotExist(err) {
		b, err = os.ReadFile(dev + "/../" + rel)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Uint reads an unsigned decimal attribute with Attr.
func Uint(sysfs string, major, minor uint32, rel string) (uint64, error) {
	s, err := Attr(sysfs, major, minor, rel)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read block device %d:%d %s: %w", major, minor, rel, err)
	}
	return v, nil
}
