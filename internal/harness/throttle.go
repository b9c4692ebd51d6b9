package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Preset is an emulated storage device: read limits that a cgroup applies
// to the workload's block device. Throttling limits rates; it adds no
// latency to a request that finds the budget free, so a QD1 read stays
// as fast as the real device until the rate limit is reached. Kernel
// threads (such as the PredictIO kernel module's workers) are in no
// cgroup of ours and bypass the throttle.
type Preset struct {
	Name string `json:"name"`
	// ReadIOPS and ReadBPS limit read requests and bytes per second;
	// 0 is unlimited.
	ReadIOPS uint64 `json:"read_iops"`
	ReadBPS  uint64 `json:"read_bps"`
	// Doc says what the preset stands for.
	Doc string `json:"doc"`
}

// Throttled reports whether the preset limits anything.
func (p Preset) Throttled() bool { return p.ReadIOPS > 0 || p.ReadBPS > 0 }

// The PredictIO paper's devices (§6.4), measured there with fio 4 KiB
// random reads: NVMe 1.26 GiB/s, SATA SSD 240 MiB/s, HDD 1.34 MiB/s. The
// random rate sets the IOPS limit (rate / 4 KiB); the byte limit is the
// class's sequential bandwidth (SATA III SSD 530 MiB/s, 7200 rpm HDD
// 160 MiB/s), the same figures as simulate's sata-ssd and hdd presets.
var Presets = []Preset{
	{Name: "this", Doc: "this machine's device, unthrottled (stands for the paper's NVMe SSD: throttling can only slow a device)"},
	{Name: "sata-ssd", ReadIOPS: 240 << 20 / 4096, ReadBPS: 530 << 20,
		Doc: "SATA SSD: 240 MiB/s of 4 KiB random reads (61440 IOPS), 530 MiB/s sequential"},
	{Name: "hdd", ReadIOPS: 343, ReadBPS: 160 << 20, // 1.34 MiB/s / 4 KiB = 343.04
		Doc: "HDD: 1.34 MiB/s of 4 KiB random reads (343 IOPS), 160 MiB/s sequential"},
}

// PresetByName returns the preset called name.
func PresetByName(name string) (Preset, error) {
	var names []string
	for _, p := range Presets {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Preset{}, fmt.Errorf("unknown device preset %q; want one of %s", name, strings.Join(names, ", "))
}

// ErrNoThrottle is returned when this machine has no cgroup I/O
// throttling: neither cgroup v2 with the io controller nor cgroup v1 blkio.
var ErrNoThrottle = errors.New("no cgroup I/O throttling: neither cgroup v2 io.max nor cgroup v1 blkio.throttle is available")

// Throttle is a cgroup that limits reads from one block device. A process
// that Enters it, and every child it starts from then on, reads at the
// preset's rates; Leave moves it back.
type Throttle struct {
	Preset    Preset `json:"preset"`
	Device    string `json:"device"`    // MAJ:MIN of the whole disk
	DevName   string `json:"dev_name"`  // e.g. vda
	Mechanism string `json:"mechanism"` // "cgroup v2 io.max", "cgroup v1 blkio.throttle" or "none"
	Dir       string `json:"cgroup,omitempty"`
	home      string // cgroup.procs of the cgroup this process came from
	entered   bool
}

// NewThrottle sets up a throttle for p on the block device holding path
// (read from the filesystem, never assumed). A preset without limits gives
// a Throttle whose Enter and Leave do nothing. Needs root.
func NewThrottle(p Preset, path string) (*Throttle, error) {
	dev, name, err := DiskOf(path)
	if err != nil {
		return nil, err
	}
	t := &Throttle{Preset: p, Device: dev, DevName: name, Mechanism: "none"}
	if !p.Throttled() {
		return t, nil
	}
	if err := t.setupV2(); err == nil {
		return t, nil
	} else if !errors.Is(err, ErrNoThrottle) {
		return nil, err
	}
	if err := t.setupV1(); err != nil {
		return nil, err
	}
	return t, nil
}

// String describes the throttle for reports.
func (t *Throttle) String() string {
	if t.Mechanism == "none" {
		return fmt.Sprintf("%s: unthrottled (%s %s)", t.Preset.Name, t.DevName, t.Device)
	}
	return fmt.Sprintf("%s: %s on %s (%s): %d read IOPS, %d read B/s, cgroup %s",
		t.Preset.Name, t.Mechanism, t.DevName, t.Device, t.Preset.ReadIOPS, t.Preset.ReadBPS, t.Dir)
}

// DiskOf returns MAJ:MIN and the name of the whole disk that holds path's
// filesystem (a partition's parent disk: cgroup throttles act on disks).
func DiskOf(path string) (devnum, name string, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", "", fmt.Errorf("find the block device of %s: %w", path, err)
	}
	maj, min := unix.Major(st.Dev), unix.Minor(st.Dev)
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", maj, min)
	if _, err := os.Stat(sys); err != nil {
		return "", "", fmt.Errorf("find the block device of %s: device %d:%d is not a block device (tmpfs, overlay or a network filesystem?); put the workload on a disk-backed filesystem", path, maj, min)
	}
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		real, err := filepath.EvalSymlinks(sys)
		if err != nil {
			return "", "", fmt.Errorf("find the disk of partition %d:%d: %w", maj, min, err)
		}
		sys = filepath.Dir(real)
	}
	b, err := os.ReadFile(filepath.Join(sys, "dev"))
	if err != nil {
		return "", "", fmt.Errorf("find the disk of %s: %w", path, err)
	}
	real, _ := filepath.EvalSymlinks(sys)
	return strings.TrimSpace(string(b)), filepath.Base(real), nil
}

// cgroupMount returns the mount point of the cgroup hierarchy of type fs
// ("cgroup2", or "cgroup" with option opt).
func cgroupMount(fstype, opt string) string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 4 || fl[2] != fstype {
			continue
		}
		if opt == "" {
			return fl[1]
		}
		for _, o := range strings.Split(fl[3], ",") {
			if o == opt {
				return fl[1]
			}
		}
	}
	return ""
}

func (t *Throttle) setupV2() error {
	mnt := cgroupMount("cgroup2", "")
	if mnt == "" {
		return ErrNoThrottle
	}
	ctl, err := os.ReadFile(filepath.Join(mnt, "cgroup.controllers"))
	if err != nil || !hasWord(string(ctl), "io") {
		return ErrNoThrottle
	}
	if err := writeFile(filepath.Join(mnt, "cgroup.subtree_control"), "+io"); err != nil {
		return err
	}
	dir, err := makeGroup(mnt)
	if err != nil {
		return err
	}
	var lim []string
	if t.Preset.ReadIOPS > 0 {
		lim = append(lim, "riops="+strconv.FormatUint(t.Preset.ReadIOPS, 10))
	}
	if t.Preset.ReadBPS > 0 {
		lim = append(lim, "rbps="+strconv.FormatUint(t.Preset.ReadBPS, 10))
	}
	if err := writeFile(filepath.Join(dir, "io.max"), t.Device+" "+strings.Join(lim, " ")); err != nil {
		os.Remove(dir)
		return err
	}
	t.Dir, t.Mechanism = dir, "cgroup v2 io.max"
	t.home = filepath.Join(mnt, ownCgroup("0", ""), "cgroup.procs")
	return nil
}

func (t *Throttle) setupV1() error {
	mnt := cgroupMount("cgroup", "blkio")
	if mnt == "" {
		return ErrNoThrottle
	}
	if _, err := os.Stat(filepath.Join(mnt, "blkio.throttle.read_iops_device")); err != nil {
		return fmt.Errorf("%w (blkio at %s has no blkio.throttle files: kernel without CONFIG_BLK_DEV_THROTTLING)", ErrNoThrottle, mnt)
	}
	dir, err := makeGroup(mnt)
	if err != nil {
		return err
	}
	for file, v := range map[string]uint64{"blkio.throttle.read_iops_device": t.Preset.ReadIOPS, "blkio.throttle.read_bps_device": t.Preset.ReadBPS} {
		if v == 0 {
			continue
		}
		if err := writeFile(filepath.Join(dir, file), t.Device+" "+strconv.FormatUint(v, 10)); err != nil {
			os.Remove(dir)
			return err
		}
	}
	t.Dir, t.Mechanism = dir, "cgroup v1 blkio.throttle"
	t.home = filepath.Join(mnt, ownCgroup("", "blkio"), "cgroup.procs")
	return nil
}

// makeGroup creates this process's throttle cgroup under mnt.
func makeGroup(mnt string) (string, error) {
	dir := filepath.Join(mnt, fmt.Sprintf("predictio-eval-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create cgroup %s (needs root): %w", dir, err)
	}
	return dir, nil
}

// ownCgroup returns this process's cgroup path in the hierarchy with id
// ("0" for v2) or the controller ctl, from /proc/self/cgroup.
func ownCgroup(id, ctl string) string {
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if (id != "" && f[0] == id && f[1] == "") || (ctl != "" && hasWord(strings.ReplaceAll(f[1], ",", " "), ctl)) {
			return f[2]
		}
	}
	return "/"
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

func writeFile(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0); err != nil {
		return fmt.Errorf("write %q to %s: %w", v, path, err)
	}
	return nil
}

// Enter moves this process (all its threads) into the throttled cgroup;
// children started afterwards are born there.
func (t *Throttle) Enter() error {
	if t.Dir == "" || t.entered {
		return nil
	}
	if err := writeFile(filepath.Join(t.Dir, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("enter throttle: %w", err)
	}
	t.entered = true
	return nil
}

// Leave moves this process back to the cgroup it came from.
func (t *Throttle) Leave() error {
	if !t.entered {
		return nil
	}
	if err := writeFile(t.home, strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("leave throttle: %w", err)
	}
	t.entered = false
	return nil
}

// Close leaves the cgroup and removes it.
func (t *Throttle) Close() error {
	if t.Dir == "" {
		return nil
	}
	err := t.Leave()
	if rerr := os.Remove(t.Dir); rerr != nil && err == nil && !errors.Is(rerr, os.ErrNotExist) {
		err = fmt.Errorf("remove cgroup %s: %w", t.Dir, rerr)
	}
	t.Dir = ""
	return err
}
