package bench

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

// scratchOnDisk returns a file in /var/tmp, skipping when that directory
// is not on a block device sysfs knows (an overlay or tmpfs).
func scratchOnDisk(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "predictio-profilecache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	f := filepath.Join(d, "a")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DeviceOf(f); err != nil {
		t.Skipf("/var/tmp is not on a block device in sysfs: %v", err)
	}
	return f
}

// TestProfileCache: a saved profile is found for any file on the same
// device of the same machine, with its date, and not under another
// machine's id; an empty cache says which device lacks a profile and how
// to measure it.
func TestProfileCache(t *testing.T) {
	f := scratchOnDisk(t)
	other := filepath.Join(filepath.Dir(f), "b")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mid := filepath.Join(t.TempDir(), "machine-id")
	os.WriteFile(mid, []byte("aaaa\n"), 0o644)
	if _, err := lookupProfile(dir, "/sys", mid, f); !errors.Is(err, ErrNoProfile) {
		t.Fatalf("empty cache: %v, want ErrNoProfile", err)
	}
	when := time.Date(2026, 11, 30, 1, 7, 0, 0, time.UTC)
	p := &formats.DeviceProfile{Version: formats.DeviceProfileVersion, Name: "vda", ReadLatencyNS: 53120, SeqReadBytesPerSec: 1.36e9, QueueDepth: 32, MeasuredAt: when}
	file, err := saveProfile(dir, "/sys", mid, p, f)
	if err != nil {
		t.Fatal(err)
	}
	c, err := lookupProfile(dir, "/sys", mid, other)
	if err != nil {
		t.Fatalf("lookup from another file on the device: %v", err)
	}
	if c.File != file || c.Profile.ReadLatencyNS != 53120 || !c.Profile.MeasuredAt.Equal(when) || c.Age() < 0 {
		t.Errorf("cached %+v from %s, want the saved profile from %s", c.Profile, c.File, file)
	}
	os.WriteFile(mid, []byte("bbbb\n"), 0o644)
	if _, err := lookupProfile(dir, "/sys", mid, f); !errors.Is(err, ErrNoProfile) {
		t.Errorf("another machine found %v; a copied cache must not apply", err)
	}
	t.Setenv(ProfileCacheEnv, "/x/y")
	if d, _ := ProfileCacheDir(); d != "/x/y/device-profiles" {
		t.Errorf("cache dir %s with %s=/x/y", d, ProfileCacheEnv)
	}
}
