package policies

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

func init() {
	register("launch", &factory{
		example: "launch:pages=65536,seen=2",
		doc: "launch profile: on ProcessExec of a profiled program, prefetch what its recent launches touched, across files in first-access order, " +
			"and warm each file's metadata (lookup, inode, directory entries); learned by `predictio run --profile DIR` and the daemon",
		params: []param{
			{"profile", "", "a profile file or a directory of them (*.launch); \"\": the runtime's own (Env.Launch)"},
			{"pages", "262144", "per-launch budget: pages prefetched at most (262144: 1 GiB of 4 KiB pages)"},
			{"files", "16384", "per-launch budget: files prefetched at most"},
			{"seen", "1", "prefetch only files touched by at least this many of the profile's launches"},
			{"meta", "on", "on: warm each file's metadata before its pages; off: pages only"},
			{"chunk", "2048", "pages per request at most (2048: 8 MiB): a launch's prefetch reads like the kernel's readahead of a large window, not in small requests"},
			{"seqlimit", "4096", "a file every launch read front to back with more pages than this gets no pages, only its metadata: the kernel's readahead keeps ahead of it; 0: prefetch it all"},
		},
		build: buildLaunch,
	})
}

// Launch profile files. A profile is one file, written by SaveLaunchProfile:
//
//	magic "PIOLNCH1"
//	uvarint version (1)
//	program, ran: file
//	uvarint files, files: file...
//	uvarint launches, each: varint start_unix_ns, uvarint wall_ns,
//	    uvarint touches, each: uvarint file, uvarint first_ns,
//	        uvarint kinds (bit k: access kind k; bit 31: TouchStructured),
//	        uvarint ranges, each: varint first (from the previous range's end), uvarint n
//	uint32 CRC32C (Castagnoli) of everything before it, little endian
//
// where file is: uvarint path length, path bytes, uvarint dev, uvarint
// ino, uvarint size, varint mtime_ns, uvarint mode.

// LaunchProfileExt is the file name extension of launch profiles.
const LaunchProfileExt = ".launch"

const launchMagic = "PIOLNCH1"

// ErrLaunchProfile is wrapped by every error about a malformed profile.
var ErrLaunchProfile = errors.New("malformed launch profile")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// LaunchProfileName returns the file name of program's profile in a
// profile directory: the program's base name and a hash of its path.
func LaunchProfileName(program string) string {
	h := fnv.New64a()
	h.Write([]byte(program))
	base := filepath.Base(program)
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, base)
	if len(clean) > 64 {
		clean = clean[:64]
	}
	return fmt.Sprintf("%s-%016x%s", clean, h.Sum64(), LaunchProfileExt)
}

// EncodeLaunchProfile returns p in the profile file format.
func EncodeLaunchProfile(p *LaunchProfile) []byte {
	var b []byte
	b = append(b, launchMagic...)
	b = binary.AppendUvarint(b, 1)
	b = appendLaunchFile(b, &p.Program)
	b = appendLaunchFile(b, &p.Ran)
	b = binary.AppendUvarint(b, uint64(len(p.Files)))
	for i := range p.Files {
		b = appendLaunchFile(b, &p.Files[i])
	}
	b = binary.AppendUvarint(b, uint64(len(p.Launches)))
	for _, l := range p.Launches {
		b = binary.AppendVarint(b, l.StartUnixNS)
		b = binary.AppendUvarint(b, l.WallNS)
		b = binary.AppendUvarint(b, uint64(len(l.Touches)))
		for _, t := range l.Touches {
			b = binary.AppendUvarint(b, uint64(t.File))
			b = binary.AppendUvarint(b, t.FirstNS)
			b = binary.AppendUvarint(b, uint64(t.Kinds))
			b = binary.AppendUvarint(b, uint64(len(t.Ranges)))
			var end uint64
			for _, r := range t.Ranges {
				b = binary.AppendVarint(b, int64(r.First-end))
				b = binary.AppendUvarint(b, uint64(r.N))
				end = r.First + uint64(r.N)
			}
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendLaunchFile(b []byte, f *LaunchFile) []byte {
	b = binary.AppendUvarint(b, uint64(len(f.Path)))
	b = append(b, f.Path...)
	b = binary.AppendUvarint(b, f.Dev)
	b = binary.AppendUvarint(b, f.Ino)
	b = binary.AppendUvarint(b, f.Size)
	b = binary.AppendVarint(b, f.MtimeNS)
	return binary.AppendUvarint(b, uint64(f.Mode))
}

// launchReader decodes a profile; the first error sticks and names the
// field. Field names hold placeholders for the indices being read
// (files[F], launches[L].touches[T].ranges[R]), filled in only for the
// error.
type launchReader struct {
	b              []byte
	off            int
	err            error
	fi, li, ti, ri int
}

func (r *launchReader) fail(field, format string, args ...any) {
	if r.err == nil {
		field = strings.NewReplacer("[F]", fmt.Sprintf("[%d]", r.fi), "[L]", fmt.Sprintf("[%d]", r.li),
			"[T]", fmt.Sprintf("[%d]", r.ti), "[R]", fmt.Sprintf("[%d]", r.ri)).Replace(field)
		r.err = fmt.Errorf("%w: field %s at byte %d: %s", ErrLaunchProfile, field, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *launchReader) uvarint(field string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail(field, "truncated or overlong number")
		return 0
	}
	r.off += n
	if v > max {
		r.fail(field, "%d exceeds %d", v, max)
		return 0
	}
	return v
}

func (r *launchReader) varint(field string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail(field, "truncated or overlong number")
		return 0
	}
	r.off += n
	return v
}

// file reads a file; field is "program", "ran" or "files[F]".
func (r *launchReader) file(field string, f *LaunchFile, program bool) {
	n := r.uvarint(field+".path length", maxLaunchPath)
	if r.err != nil {
		return
	}
	if uint64(len(r.b)-r.off) < n {
		r.fail(field+".path", "truncated")
		return
	}
	f.Path = string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	f.Dev = r.uvarint(field+".dev", math.MaxUint32)
	f.Ino = r.uvarint(field+".ino", math.MaxUint64)
	f.Size = r.uvarint(field+".size", math.MaxInt64)
	f.MtimeNS = r.varint(field + ".mtime_ns")
	f.Mode = uint32(r.uvarint(field+".mode", math.MaxUint32))

	if r.err != nil {
		return
	}
	switch {
	case f.Path == "" && !program:
	case f.Path != "" && !filepath.IsAbs(f.Path):
		r.fail(field+".path", "%q is not absolute", f.Path)
	case strings.IndexByte(f.Path, 0) >= 0:
		r.fail(field+".path", "contains a NUL byte")
	}
	if f.Path == "" && !program {
		r.fail(field+".path", "empty")
	}
}

// DecodeLaunchProfile parses a profile file's bytes. Errors wrap
// ErrLaunchProfile and name the field.
func DecodeLaunchProfile(b []byte) (*LaunchProfile, error) {
	if len(b) < len(launchMagic)+4 || string(b[:len(launchMagic)]) != launchMagic {
		return nil, fmt.Errorf("%w: not a launch profile (no %q magic)", ErrLaunchProfile, launchMagic)
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("%w: checksum %08x, want %08x (the file is damaged)", ErrLaunchProfile, got, want)
	}
	r := &launchReader{b: body, off: len(launchMagic)}
	if v := r.uvarint("version", math.MaxUint32); r.err == nil && v != 1 {
		return nil, fmt.Errorf("%w: version %d; this predictio reads version 1", ErrLaunchProfile, v)
	}
	p := &LaunchProfile{}
	r.file("program", &p.Program, true)
	r.file("ran", &p.Ran, true)
	if r.err == nil && p.Program.Path == "" {
		r.fail("program.path", "empty")
	}
	nf := r.uvarint("files", MaxLaunchFiles)
	if r.err == nil && nf > uint64(len(body)-r.off) { // every file takes bytes
		r.fail("files", "%d files in %d bytes", nf, len(body)-r.off)
	}
	if r.err == nil {
		p.Files = make([]LaunchFile, nf)
	}
	for i := range p.Files {
		r.fi = i
		r.file("files[F]", &p.Files[i], false)
	}
	nl := r.uvarint("launches", MaxLaunches)
	if r.err == nil {
		p.Launches = make([]Launch, nl)
	}
	total := 0
	for li := range p.Launches {
		if r.err != nil {
			break
		}
		total = r.launch(p, li, total)
	}
	if r.err == nil && r.off != len(body) {
		r.fail("end", "%d bytes after the last launch", len(body)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	return p, nil
}

// launch reads launch li; total counts the ranges so far.
func (r *launchReader) launch(p *LaunchProfile, li, total int) int {
	l := &p.Launches[li]
	r.li = li
	l.StartUnixNS = r.varint("launches[L].start_unix_ns")
	l.WallNS = r.uvarint("launches[L].wall_ns", math.MaxInt64)
	nt := r.uvarint("launches[L].touches", uint64(len(p.Files)))
	if r.err != nil {
		return total
	}
	l.Touches = make([]LaunchTouch, nt)
	for ti := range l.Touches {
		t := &l.Touches[ti]
		r.ti = ti
		t.File = uint32(r.uvarint("launches[L].touches[T].file", uint64(len(p.Files)-1)))
		t.FirstNS = r.uvarint("launches[L].touches[T].first_ns", math.MaxInt64)
		t.Kinds = uint32(r.uvarint("launches[L].touches[T].kinds", math.MaxUint32))
		nr := r.uvarint("launches[L].touches[T].ranges", uint64(MaxLaunchRanges-total))
		if r.err == nil && nr > uint64(len(r.b)-r.off)/2 {
			r.fail("launches[L].touches[T].ranges", "%d ranges in %d bytes", nr, len(r.b)-r.off)
		}
		if r.err != nil {
			return total
		}
		total += int(nr)
		t.Ranges = make([]Range, nr)
		var end uint64
		for i := range t.Ranges {
			r.ri = i
			delta := r.varint("launches[L].touches[T].ranges[R].first")
			n := r.uvarint("launches[L].touches[T].ranges[R].n", math.MaxUint32)
			first := end + uint64(delta)
			if r.err == nil && (n == 0 || delta < -maxLaunchPage || delta > maxLaunchPage || int64(end)+delta < 0 || first+n > maxLaunchPage) {
				r.fail("launches[L].touches[T].ranges[R]", "pages %d%+d, %d pages: empty, negative or beyond 2^52", end, delta, n)
			}
			if r.err != nil {
				return total
			}
			t.Ranges[i] = Range{First: first, N: uint32(n)}
			end = first + n
		}
	}
	return total
}

// ReadLaunchProfile reads the profile file at path.
func ReadLaunchProfile(path string) (*LaunchProfile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read launch profile: %w", err)
	}
	defer f.Close()
	// Bounded: a profile of MaxLaunchRanges ranges is well under 64 MiB.
	b, err := io.ReadAll(io.LimitReader(f, 64<<20+1))
	if err != nil {
		return nil, fmt.Errorf("read launch profile %s: %w", path, err)
	}
	if len(b) > 64<<20 {
		return nil, fmt.Errorf("read launch profile %s: %w: larger than 64 MiB", path, ErrLaunchProfile)
	}
	p, err := DecodeLaunchProfile(b)
	if err != nil {
		return nil, fmt.Errorf("read launch profile %s: %w", path, err)
	}
	return p, nil
}

// LoadLaunchModel reads a profile file, or every *.launch file of a
// directory, into a model.
func LoadLaunchModel(path string) (*LaunchModel, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load launch profiles: %w", err)
	}
	if !st.IsDir() {
		p, err := ReadLaunchProfile(path)
		if err != nil {
			return nil, err
		}
		return NewLaunchModel(p), nil
	}
	names, err := filepath.Glob(filepath.Join(path, "*"+LaunchProfileExt))
	if err != nil {
		return nil, fmt.Errorf("load launch profiles from %s: %w", path, err)
	}
	m := NewLaunchModel()
	for _, n := range names {
		p, err := ReadLaunchProfile(n)
		if err != nil {
			return nil, err
		}
		m.Put(p)
	}
	return m, nil
}
