package simulate

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/internal/blockdev"
	"github.com/predictio/predictio/policies"
)

// MachineReadahead holds the readahead parameters of files as they are on
// this machine: each file's block device's read_ahead_kb and
// max_sectors_kb, and whether its filesystem caches large folios. Its
// FileRA is a policies.Env.FileRA: the readahead model uses it wherever
// its spec leaves kb, io_kb or folios at auto.
type MachineReadahead struct {
	byFile   map[uint32]policies.RAParams
	fallback policies.RAParams
	// Summary says where the parameters came from, for reports.
	Summary string
}

// FileRA returns the parameters of file: its own device's, or the
// fallback device's for a file not found on this machine.
func (m *MachineReadahead) FileRA(file uint32) policies.RAParams {
	if p, ok := m.byFile[file]; ok {
		return p
	}
	return m.fallback
}

// devRA is one device's parameters, as read.
type devRA struct {
	name   string
	params policies.RAParams
	files  int
}

// ReadaheadOnThisMachine reads the readahead parameters of the devices
// holding paths (file id to a path on this machine, such as a bundle's
// recorded paths, or replay's under --root). Files not found here take
// those of the device holding fallback (the device a prediction models;
// "" for none: the readahead spec's defaults).
func ReadaheadOnThisMachine(paths map[uint32]string, fallback string) *MachineReadahead {
	return readaheadOn("/sys", paths, fallback)
}

func readaheadOn(sysfs string, paths map[uint32]string, fallback string) *MachineReadahead {
	m := &MachineReadahead{byFile: map[uint32]policies.RAParams{}}
	devs := map[uint64]*devRA{}
	read := func(path string) (*devRA, bool) {
		var st unix.Stat_t
		if path == "" || unix.Stat(path, &st) != nil {
			return nil, false
		}
		d := devs[st.Dev]
		if d == nil {
			d = readDevRA(sysfs, path, unix.Major(st.Dev), unix.Minor(st.Dev))
			devs[st.Dev] = d
		}
		return d, true
	}
	var missing int
	for id, p := range paths {
		if d, ok := read(p); ok {
			m.byFile[id] = d.params
			d.files++
		} else {
			missing++
		}
	}
	var parts []string
	for _, d := range devs {
		if d.files > 0 {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", d.name, describeRA(d.params), files(d.files)))
		}
	}
	sort.Strings(parts)
	if missing > 0 {
		if d, ok := read(fallback); ok {
			m.fallback = d.params
			parts = append(parts, fmt.Sprintf("%s not on this machine: %s %s, the modelled device", files(missing), d.name, describeRA(d.params)))
		} else {
			parts = append(parts, fmt.Sprintf("%s not on this machine: the readahead spec's defaults", files(missing)))
		}
	}
	m.Summary = "readahead parameters from this machine: " + strings.Join(parts, "; ")
	return m
}

// readDevRA reads the parameters of device major:minor, which holds path.
func readDevRA(sysfs, path string, major, minor uint32) *devRA {
	d := &devRA{name: fmt.Sprintf("%d:%d", major, minor)}
	if v, err := blockdev.Attr(sysfs, major, minor, "uevent"); err == nil {
		for _, l := range strings.Split(v, "\n") {
			if n, ok := strings.CutPrefix(l, "DEVNAME="); ok {
				d.name = n
			}
		}
	}
	ra, err := readKB(filepath.Join(sysfs, "class", "bdi", fmt.Sprintf("%d:%d", major, minor), "read_ahead_kb"))
	if err != nil {
		ra, err = blockdev.Uint(sysfs, major, minor, "queue/read_ahead_kb")
	}
	if err == nil && ra <= 1<<31 {
		d.params.ReadAheadKB = uint32(ra)
	}
	if io, err := blockdev.Uint(sysfs, major, minor, "queue/max_sectors_kb"); err == nil && io <= 1<<31 {
		d.params.MaxSectorsKB = uint32(io)
	}
	var fs unix.Statfs_t
	if unix.Statfs(path, &fs) == nil && fs.Type == unix.XFS_SUPER_MAGIC {
		d.params.Folios = policies.FoliosLarge // ext4 and others: by kernel (auto)
	}
	return d
}

func files(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

func readKB(path string) (uint64, error) {
	s, err := readTrim(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(s, 10, 64)
}

func describeRA(p policies.RAParams) string {
	s := fmt.Sprintf("read_ahead_kb %d, max_sectors_kb %d", p.ReadAheadKB, p.MaxSectorsKB)
	if p.Folios == policies.FoliosLarge {
		s += ", large folios"
	}
	return s
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
