package backend

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/internal/blockdev"
)

// defaultAdviseBytes is the advise limit used where sysfs does not say:
// 128 KiB, the kernel's default read_ahead_kb (VM_READAHEAD_PAGES).
const defaultAdviseBytes = 128 << 10

// maxAdviseBytes bounds one FADVISE SQE: its length field is 32 bits.
const maxAdviseBytes = 1 << 30

// adviseLimit is how much of a file one posix_fadvise(WILLNEED) or
// readahead(2) call reads. Both end in the kernel's force_page_cache_ra,
// which reads at most max(bdi io_pages, file ra_pages) pages per call, and
// silently ignores the rest of a longer range: on this machine one 64 MiB
// WILLNEED makes 8 MiB resident (read_ahead_kb 8192). The kernel backend
// splits its ranges at this limit.
type adviseLimit struct {
	pages  uint64 // pages per call
	source string // where it came from, for reports
}

// adviseLimitFor reads the limit of the block device holding fd from sysfs:
// read_ahead_kb of its bdi (ra_pages) and max_sectors_kb of its queue
// (io_pages). A partition uses its disk's. Where neither is found (a
// filesystem without a block device, such as btrfs's anonymous devices or
// tmpfs), it falls back to 128 KiB, the kernel's default readahead.
func adviseLimitFor(fd int, ps int) adviseLimit {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return adviseLimit{pages: defaultAdviseBytes / uint64(ps), source: "default (fstat: " + err.Error() + ")"}
	}
	return adviseLimitSysfs("/sys", unix.Major(st.Dev), unix.Minor(st.Dev), ps)
}

// adviseLimitSysfs is adviseLimitFor with the sysfs root and device number
// given, for tests.
func adviseLimitSysfs(sysfs string, major, minor uint32, ps int) adviseLimit {
	dev := fmt.Sprintf("%d:%d", major, minor)
	raKB, err := readKB(filepath.Join(sysfs, "class", "bdi", dev, "read_ahead_kb"))
	raOK := err == nil
	if !raOK {
		raKB, err = blockdev.Uint(sysfs, major, minor, "bdi/read_ahead_kb")
		raOK = err == nil
	}
	ioKB, err := blockdev.Uint(sysfs, major, minor, "queue/max_sectors_kb")
	ioOK := err == nil
	if !raOK && !ioOK {
		return adviseLimit{pages: defaultAdviseBytes / uint64(ps), source: "default 128 KiB (no block device " + dev + " in sysfs)"}
	}
	kb := max(raKB, ioKB)
	if kb == 0 {
		// Readahead off and no queue limit known: the kernel would read
		// nothing for a WILLNEED; keep going one page at a time, which
		// reads nothing either, but stays correct if the setting changes.
		return adviseLimit{pages: 1, source: fmt.Sprintf("device %s: read_ahead_kb 0", dev)}
	}
	pages := min(kb<<10, maxAdviseBytes) / uint64(ps)
	return adviseLimit{pages: max(pages, 1), source: fmt.Sprintf("device %s: max(read_ahead_kb %d, max_sectors_kb %d)", dev, raKB, ioKB)}
}

// readKB reads one unsigned decimal sysfs value.
func readKB(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}
