package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/policies"
)

// DefaultConfigPath is where the daemon reads its configuration.
const DefaultConfigPath = "/etc/predictio/daemon.toml"

// Config is the daemon's configuration file (TOML, docs/daemon.md). Every
// key is optional; Defaults gives the values of the missing ones.
type Config struct {
	// ProfileDir holds one launch profile per program (root-owned, 0700).
	ProfileDir string `toml:"profile_dir"`
	// Socket is the control socket: status and run's claims.
	Socket string `toml:"socket"`
	// Metrics is the Prometheus endpoint's address, host:port on a
	// loopback address; "" turns it off.
	Metrics string `toml:"metrics"`
	// HintSocket receives application hints; "" for none. HintUIDs are
	// the uids besides root allowed to send them.
	HintSocket string   `toml:"hint_socket"`
	HintUIDs   []uint32 `toml:"hint_uids"`
	// Backend is kernel or kmod.
	Backend string `toml:"backend"`
	// Effect counts what the prefetched pages were worth (used in time,
	// late, wasted: /metrics) with the effect package's observer. Its read
	// hooks run for the processes of each prefetched launch, a few hundred
	// ns on each of their reads; false turns it off.
	Effect bool `toml:"effect"`
	// Policies are the policy specs run on every event; the launch policy
	// is the one that prefetches profiles.
	Policies []string `toml:"policies"`
	// Adapters are the structure adapters in front of the tree and tensor
	// policies (adapters.ParseList: "all", "none" or a list such as
	// "sqlite,gguf"). A program whose learned launch read a file an
	// adapter recognized is followed, with its accesses traced, for as
	// long as each of its launches runs (docs/daemon.md).
	Adapters string `toml:"adapters"`
	// Poll is how often the batched event rings are looked at, and
	// FollowPoll how often while a followed program runs: how late, at
	// most, its accesses reach the adapters.
	Poll       Duration `toml:"poll"`
	FollowPoll Duration `toml:"follow_poll"`
	// LogLevel is debug, info, warn or error; LogFormat text or json.
	LogLevel  string `toml:"log_level"`
	LogFormat string `toml:"log_format"`

	Learn  LearnConfig  `toml:"learn"`
	Limits LimitsConfig `toml:"limits"`
}

// LearnConfig says which launches are learned and prefetched.
type LearnConfig struct {
	// Programs are glob patterns (filepath.Match) of the executables the
	// daemon learns and prefetches, matched against the path given to
	// exec, resolved (a pattern without a slash against its base name:
	// "python3*"); empty means every program.
	Programs []string `toml:"programs"`
	// Exclude are glob patterns of executables never learned; they win
	// over Programs.
	Exclude []string `toml:"exclude"`
	// Launches is how many launches a profile keeps.
	Launches int `toml:"launches"`
	// MinLaunches is how many launches a profile needs before it is
	// prefetched.
	MinLaunches int `toml:"min_launches"`
	// Window is how long a launch is traced and learned: the start-up of
	// a long-running program. A launch also ends when its first process
	// exits.
	Window Duration `toml:"window"`
	// Refresh: once a profile holds Launches launches, a launch is
	// learned again only when the newest is older than this (or files
	// of the profile changed); 0 learns every launch. A launch that is
	// not learned is only prefetched: tracing costs it nothing.
	Refresh Duration `toml:"refresh"`
}

// LimitsConfig bounds the daemon's memory and speculative I/O.
type LimitsConfig struct {
	// MaxProfiles caps the profiles kept (the least recently launched go
	// first); MaxProfileBytes caps each profile file.
	MaxProfiles     int  `toml:"max_profiles"`
	MaxProfileBytes Size `toml:"max_profile_bytes"`
	// Concurrent caps the launches traced (learned) at once; more are
	// prefetched but not learned.
	Concurrent int `toml:"concurrent"`
	// Queue bounds the ranges queued for the backend; InFlight the pages
	// queued or being read. Requests past them are dropped and counted.
	Queue    int `toml:"queue"`
	InFlight int `toml:"in_flight"`
	// LaunchPages and LaunchFiles bound one launch's prefetch.
	LaunchPages int `toml:"launch_pages"`
	LaunchFiles int `toml:"launch_files"`
	// RingBytes is the event ring's size, a power of two.
	RingBytes Size `toml:"ring_bytes"`
}

// Duration is a time.Duration written as "10s" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration such as 10s or 500ms: %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalText formats the duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Size is a byte count written as 4096, "64K", "16M" or "1G" in TOML.
type Size int64

// UnmarshalText parses a size.
func (s *Size) UnmarshalText(b []byte) error {
	v := strings.TrimSpace(string(b))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if t, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = t, u.m
			break
		}
	}
	var n int64
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != v || n > (1<<50)/mult {
		return fmt.Errorf("want a size such as 4096, 64K, 16M or 1G, not %q", string(b))
	}
	*s = Size(n * mult)
	return nil
}

// Defaults returns the configuration without a file.
func Defaults() Config {
	return Config{
		ProfileDir: "/var/lib/predictio/profiles",
		Socket:     "/run/predictio/daemon.sock",
		Metrics:    "127.0.0.1:9477",
		Backend:    "kernel",
		Effect:     false,
		Policies:   []string{"launch", "markov", "tree", "tensor"},
		Adapters:   "all",
		Poll:       Duration{20 * time.Millisecond},
		FollowPoll: Duration{200 * time.Microsecond},
		LogLevel:   "info",
		LogFormat:  "text",
		Learn: LearnConfig{
			Exclude:     []string{"predictio"},
			Launches:    3,
			MinLaunches: 1,
			Window:      Duration{10 * time.Second},
			Refresh:     Duration{time.Hour},
		},
		Limits: LimitsConfig{
			MaxProfiles: 512, MaxProfileBytes: 4 << 20, Concurrent: 16,
			Queue: 65536, InFlight: 262144, LaunchPages: 262144, LaunchFiles: 16384,
			RingBytes: 8 << 20,
		},
	}
}

// LoadConfig reads the configuration file at path over the defaults. A
// missing file is the defaults when missingOK. Unknown keys and bad
// values are errors naming the file and the key.
func LoadConfig(path string, missingOK bool) (Config, error) {
	c := Defaults()
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && missingOK:
		return c, c.check(path)
	case err != nil:
		return c, fmt.Errorf("read config: %w", err)
	}
	md, err := toml.Decode(string(b), &c)
	if err != nil {
		return c, fmt.Errorf("read config %s: %w", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return c, fmt.Errorf("read config %s: unknown key %s; see docs/daemon.md for the keys", path, strings.Join(keys, ", "))
	}
	return c, c.check(path)
}

// check validates c; errors name the file and the key.
func (c *Config) check(path string) error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("read config %s: key %s: %s", path, key, fmt.Sprintf(format, args...))
	}
	if !filepath.IsAbs(c.ProfileDir) {
		return bad("profile_dir", "%q is not an absolute path", c.ProfileDir)
	}
	if !filepath.IsAbs(c.Socket) {
		return bad("socket", "%q is not an absolute path", c.Socket)
	}
	if c.HintSocket != "" && !filepath.IsAbs(c.HintSocket) {
		return bad("hint_socket", "%q is not an absolute path", c.HintSocket)
	}
	if c.Metrics != "" {
		host, _, err := net.SplitHostPort(c.Metrics)
		if err != nil {
			return bad("metrics", "%q: want host:port: %v", c.Metrics, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return bad("metrics", "%q: the endpoint listens on loopback addresses only (127.0.0.1 or ::1)", c.Metrics)
		}
	}
	switch c.Backend {
	case "kernel", "kmod":
	default:
		return bad("backend", "%q: want kernel or kmod", c.Backend)
	}
	for _, s := range c.Policies {
		if !validPolicy(s) {
			return bad("policies", "%q: unknown policy; valid: %s", s, strings.Join(policies.Names(), ", "))
		}
	}
	if _, err := adapters.ParseList(c.Adapters); err != nil {
		return bad("adapters", "%v", err)
	}
	for _, p := range []struct {
		key string
		d   time.Duration
	}{{"poll", c.Poll.Duration}, {"follow_poll", c.FollowPoll.Duration}} {
		if p.d < 100*time.Microsecond || p.d > time.Second {
			return bad(p.key, "%v is out of range: want 100us to 1s", p.d)
		}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return bad("log_level", "%q: want debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("log_format", "%q: want text or json", c.LogFormat)
	}
	for _, g := range append(append([]string{}, c.Learn.Programs...), c.Learn.Exclude...) {
		if _, err := filepath.Match(g, "/x"); err != nil {
			return bad("learn.programs/exclude", "pattern %q: %v", g, err)
		}
	}
	ints := []struct {
		key    string
		v      int
		lo, hi int
	}{
		{"learn.launches", c.Learn.Launches, 1, policies.MaxLaunches},
		{"learn.min_launches", c.Learn.MinLaunches, 1, policies.MaxLaunches},
		{"limits.max_profiles", c.Limits.MaxProfiles, 1, 1 << 20},
		{"limits.concurrent", c.Limits.Concurrent, 1, 4096},
		{"limits.queue", c.Limits.Queue, 1, 1 << 24},
		{"limits.in_flight", c.Limits.InFlight, 1, 1 << 30},
		{"limits.launch_pages", c.Limits.LaunchPages, 1, 1 << 30},
		{"limits.launch_files", c.Limits.LaunchFiles, 1, policies.MaxLaunchFiles},
	}
	for _, k := range ints {
		if k.v < k.lo || k.v > k.hi {
			return bad(k.key, "%d is out of range: want %d to %d", k.v, k.lo, k.hi)
		}
	}
	if w := c.Learn.Window.Duration; w < 100*time.Millisecond || w > time.Hour {
		return bad("learn.window", "%v is out of range: want 100ms to 1h", w)
	}
	if r := c.Learn.Refresh.Duration; r < 0 || r > 8760*time.Hour {
		return bad("learn.refresh", "%v is out of range: want 0 (every launch) to 8760h", r)
	}
	if b := c.Limits.MaxProfileBytes; b < 4096 || b > 64<<20 {
		return bad("limits.max_profile_bytes", "%d is out of range: want 4K to 64M", b)
	}
	if r := c.Limits.RingBytes; r < 4096 || r > 1<<30 || r&(r-1) != 0 {
		return bad("limits.ring_bytes", "%d: want a power of two from 4K to 1G", r)
	}
	return nil
}

func validPolicy(spec string) bool {
	name := policies.SpecName(spec)
	for _, n := range policies.Names() {
		if n == name {
			return true
		}
	}
	return false
}

// wants reports whether the daemon learns and prefetches program.
func (c *LearnConfig) wants(program string) bool {
	for _, g := range c.Exclude {
		if matchProgram(g, program) {
			return false
		}
	}
	if len(c.Programs) == 0 {
		return true
	}
	for _, g := range c.Programs {
		if matchProgram(g, program) {
			return true
		}
	}
	return false
}

// matchProgram matches a pattern with a slash against the whole path, one
// without against its base name (filepath.Match: * does not cross /).
func matchProgram(pattern, program string) bool {
	name := program
	if !strings.Contains(pattern, "/") {
		name = filepath.Base(program)
	}
	ok, _ := filepath.Match(pattern, name)
	return ok
}
