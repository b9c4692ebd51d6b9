package policies

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// KernelVersion is a Linux major.minor version, such as 6.18. The zero
// value means "unknown"; the readahead model then follows the running
// kernel.
type KernelVersion struct {
	Major, Minor int
}

// ParseKernelVersion reads the major.minor version at the start of a
// kernel release string such as "6.18.44-fc-v1045" or "6.1.0-57-cloud-amd64"
// (uname -r, a bundle's host.kernel_release), or a bare "6.12".
func ParseKernelVersion(release string) (KernelVersion, error) {
	s := strings.TrimSpace(release)
	major, rest, ok := strings.Cut(s, ".")
	if !ok {
		return KernelVersion{}, fmt.Errorf("parse kernel release %q: want MAJOR.MINOR[...]", release)
	}
	minor := rest
	if i := strings.IndexFunc(rest, func(c rune) bool { return c < '0' || c > '9' }); i >= 0 {
		minor = rest[:i]
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || ma <= 0 || ma > 99 || mi < 0 || mi > 999 {
		return KernelVersion{}, fmt.Errorf("parse kernel release %q: want MAJOR.MINOR[...]", release)
	}
	return KernelVersion{ma, mi}, nil
}

// String returns "MAJOR.MINOR", or "unknown" for the zero value.
func (v KernelVersion) String() string {
	if v == (KernelVersion{}) {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", v.Major, v.Minor)
}

// AtLeast reports whether v is major.minor or later.
func (v KernelVersion) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

var running struct {
	once sync.Once
	v    KernelVersion
}

// RunningKernel returns the version of the kernel this process runs on
// (uname), or the zero value if it cannot be read.
func RunningKernel() KernelVersion {
	running.once.Do(func() {
		var u unix.Utsname
		if unix.Uname(&u) == nil {
			running.v, _ = ParseKernelVersion(unix.ByteSliceToString(u.Release[:]))
		}
	})
	return running.v
}

// raEra is the version of the readahead code a kernel runs; the model has
// one rendition of each, from the sources of the kernel it is named after.
type raEra uint8

const (
	// era61 is Linux 6.1 (used for kernels before 6.11): one
	// ondemand_readahead() for both triggers, with context readahead and
	// the "will this read hit its own marker" window merge; filemap_read
	// updates prev_pos after every copied batch.
	era61 raEra = iota
	// era612 is Linux 6.12 (used for 6.11 to 6.15): page_cache_sync_ra and
	// page_cache_async_ra disentangled (6.11); page_cache_ra_order takes
	// the folio order from its caller.
	era612
	// era618 is Linux 6.18 (used for 6.16 and later): the folio order lives
	// in file_ra_state, async windows are aligned to it, exec mappings get
	// their own fault path (do_sync_mmap_readahead's VM_EXEC branch, 6.16)
	// and ext4 caches large folios (6.16).
	era618
)

// eraOf returns the readahead code that kernel v runs; the zero version
// means the newest.
func eraOf(v KernelVersion) raEra {
	switch {
	case v == (KernelVersion{}) || v.AtLeast(6, 16):
		return era618
	case v.AtLeast(6, 11):
		return era612
	}
	return era61
}

func (e raEra) String() string {
	switch e {
	case era61:
		return "6.1"
	case era612:
		return "6.12"
	}
	return "6.18"
}

// Folios says whether a file's page cache holds large folios, which
// changes how page_cache_ra_order allocates a window.
type Folios uint8

// Folio modes.
const (
	// FoliosAuto assumes ext4, the common case: large folios from Linux
	// 6.16 on, order-0 pages before.
	FoliosAuto Folios = iota
	// FoliosLarge: the filesystem caches large folios (XFS, ext4 since
	// 6.16).
	FoliosLarge
	// FoliosSmall: order-0 pages only (ext4 before 6.16, most other
	// filesystems).
	FoliosSmall
)

// String returns auto, large or small.
func (f Folios) String() string {
	switch f {
	case FoliosLarge:
		return "large"
	case FoliosSmall:
		return "small"
	}
	return "auto"
}

// large reports whether files of this mode cache large folios on kernel
// era e.
func (f Folios) large(e raEra) bool {
	switch f {
	case FoliosLarge:
		return true
	case FoliosSmall:
		return false
	}
	return e == era618
}

// RAParams are the readahead parameters of the device and filesystem a
// file lives on. A zero field is unknown and falls back to the model's
// configuration (the readahead spec's kb, io_kb and folios).
type RAParams struct {
	// ReadAheadKB is the device's read_ahead_kb
	// (/sys/class/bdi/MAJ:MIN/read_ahead_kb): ra_pages = ReadAheadKB/4.
	ReadAheadKB uint32
	// MaxSectorsKB is the device's max_sectors_kb
	// (/sys/dev/block/MAJ:MIN/queue/max_sectors_kb), which sets the bdi's
	// io_pages: reads larger than ra_pages may use windows up to it.
	MaxSectorsKB uint32
	// Folios says whether the file's filesystem caches large folios
	// (statfs f_type: ext4, XFS); FoliosAuto assumes ext4.
	Folios Folios
}

// buildReadahead is the factory of the readahead spec.
func buildReadahead(a *args, env Env) (Policy, error) {
	ps := env.pageSize()
	kb, kbAuto := autoUint(a, "kb", 4, 1<<20)
	iokb, ioAuto := autoUint(a, "io_kb", 0, 1<<20)
	folios := map[string]Folios{"auto": FoliosAuto, "large": FoliosLarge, "small": FoliosSmall}[a.choice("folios", "auto", "large", "small")]
	kernel := a.vals["kernel"]
	if kernel == "auto" {
		kernel = env.Kernel
	}
	var kv KernelVersion
	if kernel != "" {
		v, err := ParseKernelVersion(kernel)
		switch {
		case err == nil:
			kv = v
		case a.vals["kernel"] != "auto":
			a.fail("kernel", "a kernel release such as 6.1, 6.12 or 6.18.44", err)
		default:
			// A bundle from an unknown kernel (imported, synthetic):
			// follow the running kernel, and say so.
			env.warn("readahead: kernel release %q unknown; modelling the running kernel %s", kernel, RunningKernel())
		}
	}
	if kbAuto {
		kb = DefaultReadaheadKB
	}
	if ioAuto {
		iokb = 0
	}
	cfg := ReadaheadConfig{
		Kernel:    kv,
		RAPages:   kb * 1024 / ps,
		IOPages:   iokb * 1024 / ps,
		Folios:    folios,
		PageSize:  int(ps),
		FilePages: env.FilePages,
		Resident:  env.Resident,
		MaxPages:  env.maxPages(),
	}
	if fileRA := env.FileRA; fileRA != nil && (kbAuto || ioAuto || folios == FoliosAuto) {
		cfg.FileRA = func(file uint32) RAParams {
			p := fileRA(file)
			if !kbAuto {
				p.ReadAheadKB = 0
			}
			if !ioAuto {
				p.MaxSectorsKB = 0
			}
			if folios != FoliosAuto {
				p.Folios = FoliosAuto
			}
			return p
		}
	}
	return NewReadahead(cfg), nil
}

// autoUint parses key as "auto" or an integer in [min, max].
func autoUint(a *args, key string, min, max uint64) (v uint64, auto bool) {
	if a.vals[key] == "auto" {
		return 0, true
	}
	return a.uint(key, min, max), false
}
