package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/blockdev"
)

// The device-profile cache keeps the profiles 'predictio bench device'
// measured on this machine, one per block device, so that simulate and
// replay predict with this machine's devices without being told where a
// profile is. A profile is cached under the identity of its device (this
// machine's id, the disk's name, size and, where sysfs has them, its
// serial, WWID and model), so a cache copied to another machine or a
// replaced disk finds nothing. Each file is a plain profile (it can be
// passed to --device-profile); its measured_at is the date it was taken.

// ProfileCacheEnv names the environment variable that overrides the cache
// directory.
const ProfileCacheEnv = "PREDICTIO_CACHE_DIR"

// ErrNoProfile means no profile of a device is cached.
var ErrNoProfile = errors.New("no device profile cached")

// ProfileCacheDir returns the directory of cached device profiles:
// $PREDICTIO_CACHE_DIR/device-profiles if set, else
// $XDG_CACHE_HOME/predictio/device-profiles, else
// ~/.cache/predictio/device-profiles (os.UserCacheDir).
func ProfileCacheDir() (string, error) {
	if d := os.Getenv(ProfileCacheEnv); d != "" {
		return filepath.Join(d, "device-profiles"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locate the device profile cache: %w; set %s", err, ProfileCacheEnv)
	}
	return filepath.Join(d, "predictio", "device-profiles"), nil
}

// BlockDevice identifies the block device holding a file.
type BlockDevice struct {
	Major, Minor uint32
	// Name is the device's name ("vda", "nvme0n1p2"), from sysfs.
	Name string
	// ID is a short hash of this machine's id and the whole disk's name,
	// size, serial, WWID and model: the cache key.
	ID string
}

// String returns "vda (254:0)".
func (d BlockDevice) String() string { return fmt.Sprintf("%s (%d:%d)", d.Name, d.Major, d.Minor) }

// DeviceOf returns the block device holding path, read from sysfs (for a
// partition, the identity is its disk's).
func DeviceOf(path string) (BlockDevice, error) { return deviceOf("/sys", "/etc/machine-id", path) }

func deviceOf(sysfs, machineID, path string) (BlockDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return BlockDevice{}, fmt.Errorf("find the device of %s: %w", path, err)
	}
	d := BlockDevice{Major: unix.Major(st.Dev), Minor: unix.Minor(st.Dev)}
	uevent, err := blockdev.Attr(sysfs, d.Major, d.Minor, "uevent")
	if err != nil {
		return BlockDevice{}, fmt.Errorf("find the device of %s: %d:%d is not a block device in sysfs (%w); profile a file on a disk filesystem", path, d.Major, d.Minor, err)
	}
	for _, l := range strings.Split(uevent, "\n") {
		if v, ok := strings.CutPrefix(l, "DEVNAME="); ok {
			d.Name = v
		}
	}
	if d.Name == "" {
		d.Name = fmt.Sprintf("%d_%d", d.Major, d.Minor)
	}
	h := sha256.New()
	mid, _ := os.ReadFile(machineID)
	fmt.Fprintf(h, "machine=%s\n", strings.TrimSpace(string(mid)))
	disk := wholeDisk(sysfs, d)
	fmt.Fprintf(h, "disk=%s\n", disk)
	for _, rel := range []string{"size", "serial", "wwid", "device/serial", "device/wwid", "device/model", "device/vendor"} {
		if v, err := attrOf(sysfs, disk, rel); err == nil {
			fmt.Fprintf(h, "%s=%s\n", rel, v)
		}
	}
	d.ID = hex.EncodeToString(h.Sum(nil))[:12]
	return d, nil
}

// wholeDisk returns the sysfs name of the disk holding d: d itself, or its
// parent for a partition.
func wholeDisk(sysfs string, d BlockDevice) string {
	link := filepath.Join(sysfs, "dev", "block", fmt.Sprintf("%d:%d", d.Major, d.Minor))
	real, err := filepath.EvalSymlinks(link)
	if err != nil {
		return d.Name
	}
	if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
		return filepath.Base(filepath.Dir(real))
	}
	return filepath.Base(real)
}

func attrOf(sysfs, disk, rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join(sysfs, "block", disk, rel))
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", os.ErrNotExist
	}
	return v, nil
}

// profileFile returns the cache file of device d.
func profileFile(dir string, d BlockDevice) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%s.json", strings.ReplaceAll(d.Name, "/", "_"), d.ID))
}

// SaveProfile caches p as the profile of the device holding path (the
// file it was measured on) and returns the cache file.
func SaveProfile(p *formats.DeviceProfile, path string) (string, error) {
	dir, err := ProfileCacheDir()
	if err != nil {
		return "", err
	}
	return saveProfile(dir, "/sys", "/etc/machine-id", p, path)
}

func saveProfile(dir, sysfs, machineID string, p *formats.DeviceProfile, path string) (string, error) {
	d, err := deviceOf(sysfs, machineID, path)
	if err != nil {
		return "", fmt.Errorf("cache device profile: %w", err)
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return "", fmt.Errorf("cache device profile: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache device profile: %w", err)
	}
	file := profileFile(dir, d)
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("cache device profile: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("cache device profile: %w", err)
	}
	return file, nil
}

// CachedProfile is a profile found in the cache.
type CachedProfile struct {
	Profile *formats.DeviceProfile
	Device  BlockDevice
	File    string // the cache file
}

// Age returns how long ago the profile was measured.
func (c *CachedProfile) Age() time.Duration { return time.Since(c.Profile.MeasuredAt) }

// LookupProfile returns the cached profile of the device holding path; an
// error wrapping ErrNoProfile when none is cached, naming the device and
// the command that measures it.
func LookupProfile(path string) (*CachedProfile, error) {
	dir, err := ProfileCacheDir()
	if err != nil {
		return nil, err
	}
	return lookupProfile(dir, "/sys", "/etc/machine-id", path)
}

func lookupProfile(dir, sysfs, machineID, path string) (*CachedProfile, error) {
	d, err := deviceOf(sysfs, machineID, path)
	if err != nil {
		return nil, err
	}
	file := profileFile(dir, d)
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w for %s in %s: measure it with 'predictio bench device --file FILE' on that filesystem", ErrNoProfile, d, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("read cached device profile: %w", err)
	}
	var p formats.DeviceProfile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("read cached device profile %s: %w; measure it again with 'predictio bench device'", file, err)
	}
	return &CachedProfile{Profile: &p, Device: d, File: file}, nil
}
