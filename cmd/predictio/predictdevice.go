package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/bench"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/replay"
	"github.com/predictio/predictio/simulate"
)

// defaultScratch is where 'bench device' measures by default, and so the
// device a prediction models when none of its files is on this machine.
const defaultScratch = "/var/tmp/predictio-device.dat"

// profileMaxAge is the age past which a cached profile is used with a
// warning to measure it again.
const profileMaxAge = 90 * 24 * time.Hour

// deviceFlags choose the device model of a prediction (simulate, and
// replay's predicted column).
type deviceFlags struct {
	profile   string
	preset    string
	measure   bool
	fileRates string
}

// File rates modes (--file-rates).
const (
	fileRatesAuto     = "auto"
	fileRatesRecorded = "recorded"
	fileRatesProfile  = "profile"
)

const fileRatesUsage = "device time per file: recorded (scale each file's by how its cold reads and faults ran in the recording against the device profile), profile (the profile's rates for every file), or auto (recorded when the device is a measured profile and the bundle was recorded on this host and kernel)"

// checkFileRates checks the --file-rates value.
func (d *deviceFlags) checkFileRates() error {
	switch d.fileRates {
	case fileRatesAuto, fileRatesRecorded, fileRatesProfile:
	default:
		return usageError{fmt.Errorf("flag --file-rates: %q: use auto, recorded or profile", d.fileRates)}
	}
	if d.fileRates == fileRatesRecorded && d.preset != "" {
		return usageError{errors.New("flags --file-rates recorded and --device: the file rates scale a measured profile of this machine; use --device-profile or this machine's cached profile")}
	}
	return nil
}

func (d *deviceFlags) register(fs *flag.FlagSet, what string) {
	fs.StringVar(&d.profile, "device-profile", "", "device profile `FILE` measured by 'predictio bench device' for "+what)
	fs.StringVar(&d.preset, "device", "", "device preset for "+what+" ("+strings.Join(simulate.PresetNames(), ", ")+"), instead of this machine's device; default: the cached profile of the device holding the files")
	fs.BoolVar(&d.measure, "measure-device", false, "when this machine's device has no cached profile, measure one now ('bench device' on "+defaultScratch+", about 30 s) and cache it")
	fs.StringVar(&d.fileRates, "file-rates", fileRatesAuto, fileRatesUsage)
}

// fileRates fits the file rates of bundle b for device choice ch, as f's
// --file-rates says (FitFileRates); nil and a note where they are not
// used.
func fileRates(f deviceFlags, ch deviceChoice, b *formats.Bundle, pageSize int) (*simulate.FileRates, string, error) {
	switch {
	case f.fileRates == fileRatesProfile:
		return nil, "", nil
	case !ch.calibrated:
		if f.fileRates == fileRatesRecorded {
			return nil, "", usageError{errors.New("flag --file-rates recorded: the device is not a measured profile; measure one with 'predictio bench device' or add --measure-device")}
		}
		return nil, "", nil
	case f.fileRates == fileRatesAuto:
		here := formats.HostInfo()
		if h := b.Manifest().Host; h.Hostname != here.Hostname || h.KernelRelease != here.KernelRelease {
			return nil, fmt.Sprintf("file rates: the profile's for every file (the bundle was recorded on %s, kernel %s, not on this host; --file-rates recorded scales them by the recording anyway)", cmp.Or(h.Hostname, "-"), cmp.Or(h.KernelRelease, "-")), nil
		}
	}
	r, err := simulate.FitFileRates(b, ch.device, pageSize)
	if err != nil {
		return nil, "", err
	}
	if r == nil {
		return nil, "file rates: the profile's for every file (the bundle has no cold read or fault with a service time that ran alone, or fewer than half of them did: its threads read concurrently)", nil
	}
	return r, "", nil
}

// deviceChoice is the device model of a prediction and where it came from.
type deviceChoice struct {
	device     simulate.Device
	calibrated bool
	// path is a file on the modelled device of this machine, for the
	// readahead parameters of files not found here; "" when the device is
	// not this machine's.
	path  string
	notes []string
}

// chooseDevice picks the device model: --device-profile, else --device,
// else the cached profile of this machine's device holding most of files
// (or of defaultScratch when none is here), measured now with
// --measure-device if none is cached; without one the prediction is
// uncalibrated, on the nvme preset.
func chooseDevice(f deviceFlags, files []string, stderr io.Writer) (deviceChoice, error) {
	switch {
	case f.profile != "":
		p, err := loadDeviceProfile(f.profile)
		if err != nil {
			return deviceChoice{}, err
		}
		d, err := simulate.DeviceFromProfile(p)
		if err != nil {
			return deviceChoice{}, fmt.Errorf("%s: %w", f.profile, err)
		}
		d.Source += " (" + f.profile + ")"
		ch := deviceChoice{device: d, calibrated: true}
		if _, err := os.Stat(p.Path); p.Path != "" && err == nil {
			ch.path = p.Path // measured here: its device's readahead too
		}
		return ch, nil
	case f.preset != "":
		d, err := simulate.Preset(f.preset)
		if err != nil {
			return deviceChoice{}, usageError{fmt.Errorf("flag --device: %w", err)}
		}
		return deviceChoice{device: d, notes: []string{fmt.Sprintf("prediction uncalibrated: device preset %s (--device), not a measurement", f.preset)}}, nil
	}
	path := deviceHolding(files)
	c, err := bench.LookupProfile(path)
	if errors.Is(err, bench.ErrNoProfile) && f.measure {
		c, err = measureNow(path, stderr)
	}
	if err != nil {
		d := simulate.Presets["nvme"]
		note := fmt.Sprintf("prediction uncalibrated, on the nvme preset: %v, or add --measure-device", err)
		if !errors.Is(err, bench.ErrNoProfile) {
			note = fmt.Sprintf("prediction uncalibrated, on the nvme preset: no profile of this machine's device: %v", err)
		}
		return deviceChoice{device: d, path: path, notes: []string{note}}, nil
	}
	d, err := simulate.DeviceFromProfile(c.Profile)
	if err != nil {
		return deviceChoice{}, fmt.Errorf("cached device profile %s: %w; measure it again with 'predictio bench device'", c.File, err)
	}
	d.Name = c.Device.Name
	d.Source = fmt.Sprintf("this machine's %s, measured %s (%s)", c.Device, c.Profile.MeasuredAt.UTC().Format("2006-01-02"), c.File)
	ch := deviceChoice{device: d, calibrated: true, path: path}
	if age := c.Age(); age > profileMaxAge {
		ch.notes = append(ch.notes, fmt.Sprintf("the device profile of %s is %d days old; measure it again with 'predictio bench device'", c.Device, int(age.Hours()/24)))
	}
	if k := c.Profile.Kernel; k != "" && k != kernelRelease() {
		ch.notes = append(ch.notes, fmt.Sprintf("the device profile of %s was measured under kernel %s, this is %s", c.Device, k, kernelRelease()))
	}
	return ch, nil
}

// usageError marks a bad flag value: exit status 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// deviceHolding returns a path on the block device that holds the most of
// files on this machine, or defaultScratch's directory when none is here.
func deviceHolding(files []string) string {
	count := map[uint64]int{}
	first := map[uint64]string{}
	for _, p := range files {
		var st unix.Stat_t
		if p == "" || unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if count[st.Dev]++; count[st.Dev] == 1 {
			first[st.Dev] = p
		}
	}
	devs := make([]uint64, 0, len(count))
	for d := range count {
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool {
		return count[devs[i]] > count[devs[j]] || count[devs[i]] == count[devs[j]] && devs[i] < devs[j]
	})
	if len(devs) > 0 {
		return first[devs[0]]
	}
	return filepath.Dir(defaultScratch)
}

// measureNow measures the device holding path with 'bench device' and
// caches the profile, saying so on stderr. It measures only the device of
// defaultScratch: elsewhere it would write a 1 GiB scratch file among the
// user's.
func measureNow(path string, stderr io.Writer) (*bench.CachedProfile, error) {
	want, err := bench.DeviceOf(path)
	if err != nil {
		return nil, err
	}
	scratchDev, err := bench.DeviceOf(filepath.Dir(defaultScratch))
	if err != nil || scratchDev.ID != want.ID {
		return nil, fmt.Errorf("--measure-device measures with %s, which is not on %s; run 'predictio bench device --file FILE' with FILE on %s", defaultScratch, want, want)
	}
	fmt.Fprintf(stderr, "predictio: no device profile of %s cached; measuring it now with %s (about 30 s)\n", want, defaultScratch)
	p, err := bench.MeasureDevice(context.Background(), bench.DeviceConfig{Path: defaultScratch, Size: 1 << 30, Duration: 30 * time.Second, Log: stderr})
	if err != nil {
		return nil, fmt.Errorf("measure device %s: %w", want, err)
	}
	file, err := bench.SaveProfile(p, defaultScratch)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "predictio: cached the profile of %s in %s\n", want, file)
	return bench.LookupProfile(path)
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func loadDeviceProfile(path string) (*formats.DeviceProfile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load device profile: %w", err)
	}
	var p formats.DeviceProfile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("load device profile %s: %w", path, err)
	}
	return &p, nil
}

// predictReplay fills replay's predicted column with this machine's device
// (or the one the flags name).
func predictReplay(r *replay.Replayer, rep *replay.Report, f deviceFlags, bundle string) error {
	ch, err := chooseDevice(f, r.FilePaths(), os.Stderr)
	if err != nil {
		return err
	}
	pred := replay.Prediction{Device: ch.device, Calibrated: ch.calibrated, DevicePath: ch.path, Notes: ch.notes}
	if r.RecordedPaths() {
		b, err := formats.Open(bundle)
		if err != nil {
			return err
		}
		rates, note, err := fileRates(f, ch, b, b.Manifest().Host.PageSize)
		b.Close()
		if err != nil {
			return err
		}
		pred.FileRates = rates
		if note != "" {
			pred.Notes = append(pred.Notes, note)
		}
	} else if f.fileRates == fileRatesRecorded {
		pred.Notes = append(pred.Notes, "file rates: the profile's for every file (the replay reads other files than the recording, --root)")
	}
	return r.Predict(rep, pred)
}
