package trace

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"

	"github.com/predictio/predictio/formats"
)

// AnonymizeOptions configures Anonymize.
type AnonymizeOptions struct {
	// Salt keys the hashes. The same salt maps the same name to the same
	// hash across bundles; an empty salt picks a random one that is not
	// stored anywhere, so the output cannot be linked to other bundles.
	Salt string
	// Comm also replaces process names with salted hashes.
	Comm bool
}

// Anonymizer hashes path components and process names with HMAC-SHA256.
type Anonymizer struct {
	key   []byte
	cache map[string]string // path component -> hash
	comms map[string]string // comm -> replacement
}

// NewAnonymizer returns an Anonymizer keyed by salt, or by 32 random bytes
// when salt is empty.
func NewAnonymizer(salt string) (*Anonymizer, error) {
	key := []byte(salt)
	if salt == "" {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("anonymize: random salt: %w", err)
		}
	}
	return &Anonymizer{key: key, cache: map[string]string{}, comms: map[string]string{}}, nil
}

// hash returns the first 12 hex digits of HMAC-SHA256(key, s).
func (an *Anonymizer) hash(s string) string {
	if h, ok := an.cache[s]; ok {
		return h
	}
	m := hmac.New(sha256.New, an.key)
	m.Write([]byte(s))
	h := hex.EncodeToString(m.Sum(nil))[:12]
	an.cache[s] = h
	return h
}

// Path replaces each component of p with its salted hash. It keeps a
// leading slash, the number of components (the directory depth), the
// components "." and "..", and the extension of the last component (up to
// 10 letters or digits, e.g. ".sqlite"). The same component always maps
// to the same hash, so files in one directory stay in one directory.
func (an *Anonymizer) Path(p string) string {
	if p == "" {
		return ""
	}
	parts := strings.Split(p, "/")
	for i, c := range parts {
		switch c {
		case "", ".", "..":
			continue
		}
		ext := ""
		if i == len(parts)-1 {
			ext = keptExt(c)
		}
		parts[i] = an.hash(c) + ext
	}
	return strings.Join(parts, "/")
}

// keptExt returns the extension of a file name worth keeping: short,
// alphanumeric, and not the whole name (".bashrc" has none).
func keptExt(name string) string {
	ext := path.Ext(name)
	if len(ext) < 2 || len(ext) > 11 || ext == name {
		return ""
	}
	for _, r := range ext[1:] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return ""
		}
	}
	return ext
}

// Comm replaces a process name with "c" and 12 hex digits (fits the
// kernel's 15-character comm).
func (an *Anonymizer) Comm(c string) string {
	if c == "" {
		return ""
	}
	if h, ok := an.comms[c]; ok {
		return h
	}
	m := hmac.New(sha256.New, an.key)
	m.Write([]byte("comm:" + c))
	h := "c" + hex.EncodeToString(m.Sum(nil))[:12]
	an.comms[c] = h
	return h
}

// Anonymize copies the bundle in into out, replacing file paths (and, with
// o.Comm, process names) by salted hashes. It also hashes the paths and
// names the manifest holds: hostname, mount points, include/exclude
// filters, hint socket, and drops the recorded command line. Timestamps,
// pids, devices, inodes, sizes, pages, kinds and hints are kept.
//
// opts are passed to formats.Open (formats.NoVerify).
func Anonymize(in, out string, o AnonymizeOptions, opts ...formats.OpenOption) (copyCounts, error) {
	an, err := NewAnonymizer(o.Salt)
	if err != nil {
		return copyCounts{}, err
	}
	rw := rewriter{
		file: func(f *formats.File) bool { f.Path = an.Path(f.Path); return true },
		manifest: func(m *formats.Manifest) {
			if m.Host.Hostname != "" {
				m.Host.Hostname = "h" + an.hash("host:"+m.Host.Hostname)
			}
			for i := range m.Filesystems {
				m.Filesystems[i].MountPoint = an.Path(m.Filesystems[i].MountPoint)
			}
			r := &m.Recording
			if len(r.CommandLine) > 0 {
				r.CommandLine = []string{"(removed by anonymize)"}
			}
			r.Include = hashAll(an.Path, r.Include)
			r.Exclude = hashAll(an.Path, r.Exclude)
			r.HintSocket = an.Path(r.HintSocket)
			if o.Comm {
				r.Comm = hashAll(an.Comm, r.Comm)
			}
			// Notes may quote paths (import notes name the source file).
			m.Notes = nil
			how := "paths"
			if o.Comm {
				how = "paths and comm"
			}
			salt := "a random salt that was not stored"
			if o.Salt != "" {
				salt = "a user-given salt"
			}
			m.Notes = append(m.Notes, fmt.Sprintf("anonymized: %s replaced by HMAC-SHA256 hashes keyed with %s; extension and directory depth kept; notes and command line removed", how, salt))
		},
	}
	if o.Comm {
		rw.access = func(a *formats.Access) bool { a.Comm = an.Comm(a.Comm); return true }
	}
	cc, err := rewrite(in, out, rw, opts)
	if err != nil {
		return cc, fmt.Errorf("anonymize: %w", err)
	}
	return cc, nil
}

func hashAll(fn func(string) string, s []string) []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fn(v)
	}
	return out
}
