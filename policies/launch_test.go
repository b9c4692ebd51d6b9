package policies

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

func lf(path string, ino uint64) LaunchFile {
	return LaunchFile{Path: path, Dev: 254 << 20, Ino: ino, Size: 1 << 20, MtimeNS: 1700000000e9, Mode: 0o100644}
}

// recordLaunch runs events through a recorder and merges the launch into p.
func recordLaunch(t *testing.T, p *LaunchProfile, files map[uint32]LaunchFile, evs []Event, keep int) {
	t.Helper()
	r := NewLaunchRecorder(1000)
	for i := range evs {
		r.Observe(&evs[i])
	}
	l, fs := r.Launch(func(id uint32) (LaunchFile, bool) { f, ok := files[id]; return f, ok }, 42, 5e6)
	if err := p.AddLaunch(l, fs, keep); err != nil {
		t.Fatal(err)
	}
}

func acc(ts uint64, file uint32, kind formats.AccessKind, page uint64, n uint32) Event {
	return Event{Kind: EventFileAccess, TS: ts, PID: 7, File: file, Access: FileAccess{Kind: kind, Page: page, NPages: n}}
}

func TestLaunchRecorderOrderAndRanges(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/usr/bin/prog", 1), 2: lf("/usr/lib/libc.so", 2), 3: lf("/etc/conf", 3), 4: lf("/usr/lib/dir", 4)}
	p := &LaunchProfile{Program: files[1]}
	recordLaunch(t, p, files, []Event{
		{Kind: EventProcessExec, TS: 1000, PID: 7, File: 1},
		acc(1100, 2, formats.KindFault, 10, 1),
		acc(1200, 2, formats.KindMap, 11, 4), // adjacent: merged into 10+5
		acc(1300, 1, formats.KindRead, 0, 2),
		acc(1400, 2, formats.KindRead, 100, 1),
		acc(1500, 3, formats.KindCacheAdd, 0, 8), // not demand: ignored
		acc(1600, 4, formats.KindReaddir, 0, 0),  // metadata: a touch with no pages
		acc(1700, 2, formats.KindRead, 2, 3),     // before the others: sorted on Launch
	}, 3)
	plan := p.Plan()
	var got []string
	for _, s := range plan {
		got = append(got, s.File.Path)
	}
	want := []string{"/usr/bin/prog", "/usr/lib/libc.so", "/usr/lib/dir"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan order %v, want %v", got, want)
	}
	if r := plan[1].Ranges; !reflect.DeepEqual(r, []Range{{2, 3}, {10, 5}, {100, 1}}) {
		t.Errorf("libc ranges %v", r)
	}
	if r := plan[0].Ranges; !reflect.DeepEqual(r, []Range{{0, 2}}) {
		t.Errorf("prog ranges %v", r)
	}
	if len(plan[2].Ranges) != 0 || plan[2].FirstNS != 600 || !Has(plan[2].Kinds, formats.KindReaddir) || Has(plan[2].Kinds, formats.KindRead) {
		t.Errorf("dir step %+v", plan[2])
	}
	if !Has(plan[0].Kinds, formats.KindExec) || !Has(plan[0].Kinds, formats.KindRead) || !Has(plan[1].Kinds, formats.KindMap) {
		t.Errorf("kinds %b %b", plan[0].Kinds, plan[1].Kinds)
	}
	if p.Pages() != 11 {
		t.Errorf("pages %d, want 11", p.Pages())
	}
}

// TestPlanRecurring: three launches that query a database at different
// keys share its header and interior pages; the plan holds those, not
// what one launch read, while a file only one launch touched keeps all
// its pages, as does a mapped file. With two launches the plan is their
// union.
func TestPlanRecurring(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/db", 1), 2: lf("/input", 2)}
	p := &LaunchProfile{Program: lf("/usr/bin/sqlite3", 9)}
	scans := [][]Event{
		{acc(1000, 1, formats.KindRead, 0, 10), acc(2000, 1, formats.KindRead, 100, 10)},
		{acc(1000, 1, formats.KindRead, 0, 10), acc(2000, 1, formats.KindRead, 200, 10), acc(3000, 2, formats.KindRead, 0, 4)},
		{acc(1000, 1, formats.KindRead, 0, 5), acc(2000, 1, formats.KindRead, 300, 10), acc(2500, 1, formats.KindRead, 105, 2)},
	}
	for i, evs := range scans {
		recordLaunch(t, p, files, evs, 3)
		want := map[int][]Range{0: {{0, 10}, {100, 10}}, 1: {{0, 10}, {100, 10}, {200, 10}}, 2: {{0, 10}, {105, 2}}}[i]
		if got := p.Plan()[0].Ranges; !reflect.DeepEqual(got, want) {
			t.Errorf("after %d launches /db ranges %v, want %v", i+1, got, want)
		}
	}
	for _, s := range p.Plan() {
		if s.File.Path == "/input" && !reflect.DeepEqual(s.Ranges, []Range{{0, 4}}) {
			t.Errorf("/input ranges %v, want all of its one launch's", s.Ranges)
		}
	}
	// A mapped library's faults differ from launch to launch with the
	// timing of fault-around: its plan is the union.
	lib := map[uint32]LaunchFile{3: lf("/libc", 3)}
	q := &LaunchProfile{Program: lf("/usr/bin/python3", 8)}
	for i := range uint64(3) {
		recordLaunch(t, q, lib, []Event{acc(1000, 3, formats.KindFault, 16*i, 16)}, 3)
	}
	if got := q.Plan()[0].Ranges; !reflect.DeepEqual(got, []Range{{0, 48}}) {
		t.Errorf("mapped /libc ranges %v, want the union [0, 48)", got)
	}
}

// TestPlanScattered: a launch that queried a database at scattered pages
// says little about the next launch's keys, so until three launches have
// touched the file its plan holds only the first scatterRanges ranges each
// read (the header and the top of the descent), not the 2000 pages of
// another key range; reads of larger ranges, and mapped files, keep all
// their pages; from three launches on, the pages they share decide.
func TestPlanScattered(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/db", 1), 2: lf("/chunks", 2), 3: lf("/data.mdb", 3)}
	p := &LaunchProfile{Program: lf("/usr/bin/sqlite3", 9)}
	query := func(key uint64) []Event {
		evs := []Event{acc(1000, 1, formats.KindRead, 0, 1), acc(1010, 1, formats.KindRead, 1, 1)}
		for i := range uint64(2000) {
			evs = append(evs, acc(1100+i, 1, formats.KindRead, 100+(key+i*7919)%100000, 1))
		}
		for i := range uint64(100) {
			evs = append(evs, acc(5000+i, 2, formats.KindRead, (i*37)%100*64, 16))
			evs = append(evs, acc(6000+i, 3, formats.KindFault, 200000+(key+i*7919)%100000, 1))
		}
		return evs
	}
	planOf := func(path string) []Range {
		for _, s := range p.Plan() {
			if s.File.Path == path {
				return s.Ranges
			}
		}
		t.Fatalf("%s not in the plan", path)
		return nil
	}
	recordLaunch(t, p, files, query(0), 3)
	want := []Event{acc(0, 1, formats.KindRead, 0, 2)}
	for i := range uint64(scatterRanges - 1) {
		want = append(want, acc(0, 1, formats.KindRead, 100+i*7919%100000, 1))
	}
	var wantRanges []Range
	for _, e := range want {
		wantRanges = append(wantRanges, Range{First: e.Access.Page, N: e.Access.NPages})
	}
	if got := planOf("/db"); !reflect.DeepEqual(got, mergeRanges(wantRanges)) {
		t.Errorf("/db after one launch: %d ranges, %d pages; want its first %d ranges read", len(got), rangePages(got), scatterRanges)
	}
	if got := planOf("/chunks"); rangePages(got) != 1600 {
		t.Errorf("/chunks, read in 16-page ranges: %d pages planned, want all 1600", rangePages(got))
	}
	if got := planOf("/data.mdb"); rangePages(got) != 100 {
		t.Errorf("/data.mdb, mapped: %d pages planned, want all 100", rangePages(got))
	}
	recordLaunch(t, p, files, query(50000), 3)
	if got := planOf("/db"); rangePages(got) > 2*scatterRanges+1 {
		t.Errorf("/db after two launches: %d pages planned, want the two heads' union", rangePages(got))
	}
	recordLaunch(t, p, files, query(50000), 3)
	if got := planOf("/db"); rangePages(got) != 2002 {
		t.Errorf("/db after three launches, two at one key: %d pages planned, want the 2002 that two read", rangePages(got))
	}
}

// TestPlanStructured: an LMDB env the adapters recognized, read through
// its mapping at other keys by each launch, is planned from the first
// scatterRanges ranges of each of its first two launches and then from
// the pages the launches share, not from the union that an unrecognized
// mapped file (a library) keeps.
func TestPlanStructured(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/env/data.mdb", 1), 2: lf("/usr/lib/liblmdb.so", 2)}
	p := &LaunchProfile{Program: lf("/usr/bin/scan", 9)}
	scan := func(key uint64) {
		t.Helper()
		r := NewLaunchRecorder(1000)
		for i := range uint64(200) {
			r.Observe(ptr(acc(1000+i, 1, formats.KindMap, key+i*64, 16)))
			r.Observe(ptr(acc(1000+i, 2, formats.KindMap, key/10+i*64, 16)))
		}
		r.Observe(ptr(acc(5000, 1, formats.KindFault, 0, 1)))                // the meta page, every launch
		r.MarkStructured(func(id uint32) bool { return id == 1 || id == 3 }) // 3: not touched, nothing
		l, fs := r.Launch(func(id uint32) (LaunchFile, bool) { f, ok := files[id]; return f, ok }, 42, 5e6)
		if err := p.AddLaunch(l, fs, 3); err != nil {
			t.Fatal(err)
		}
	}
	pages := func(path string) uint64 {
		for _, s := range p.Plan() {
			if s.File.Path == path {
				return rangePages(s.Ranges)
			}
		}
		return 0
	}
	scan(100000)
	if got := pages("/env/data.mdb"); got != scatterRanges*16 {
		t.Errorf("data.mdb after one launch: %d pages planned, want its first %d ranges' %d", got, scatterRanges, scatterRanges*16)
	}
	if got := pages("/usr/lib/liblmdb.so"); got != 3200 {
		t.Errorf("the library after one launch: %d pages planned, want all 3200", got)
	}
	scan(500000)
	scan(900000)
	if got := pages("/env/data.mdb"); got != 1 {
		t.Errorf("data.mdb after three launches at other keys: %d pages planned, want the meta page they share", got)
	}
	if got := pages("/usr/lib/liblmdb.so"); got != 3*3200 {
		t.Errorf("the library after three launches: %d pages planned, want the union", got)
	}
}

func ptr(e Event) *Event { return &e }

func TestRecurringRangesSplitsLongSpans(t *testing.T) {
	big := Range{First: 10, N: math.MaxUint32}
	got := recurringRanges([][]Range{{big, {First: 10 + math.MaxUint32, N: 5}}, {{First: 0, N: math.MaxUint32}, {First: math.MaxUint32, N: 100}}}, 2)
	var n uint64
	for _, r := range got {
		n += uint64(r.N)
	}
	if got[0].First != 10 || n != math.MaxUint32+5 {
		t.Errorf("ranges %v: %d pages from %d, want %d from 10", got, n, got[0].First, uint64(math.MaxUint32)+5)
	}
}

func TestLaunchProfileKeepsLastLaunchesAndDropsChangedFiles(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/a", 1), 2: lf("/b", 2)}
	p := &LaunchProfile{Program: lf("/usr/bin/x", 9)}
	for i := range 4 {
		recordLaunch(t, p, files, []Event{acc(2000, 1, formats.KindRead, uint64(i), 1), acc(3000, 2, formats.KindRead, 50, 1)}, 2)
	}
	if len(p.Launches) != 2 {
		t.Fatalf("%d launches kept, want 2", len(p.Launches))
	}
	if r := p.Plan()[0].Ranges; !reflect.DeepEqual(r, []Range{{2, 2}}) {
		t.Errorf("/a ranges %v, want pages 2 and 3 of the last two launches", r)
	}
	// /b is replaced (new inode): the old launches' touches of it go.
	files[2] = lf("/b", 22)
	recordLaunch(t, p, files, []Event{acc(2000, 2, formats.KindRead, 7, 1)}, 3)
	for _, s := range p.Plan() {
		if s.File.Path == "/b" && (s.File.Ino != 22 || !reflect.DeepEqual(s.Ranges, []Range{{7, 1}}) || s.Seen != 1) {
			t.Errorf("/b after replacement: %+v ranges %v", *s.File, s.Ranges)
		}
	}
	p.Invalidate(p.Plan()[0].Index)
	for _, s := range p.Plan() {
		if s.File.Path == "/a" {
			t.Errorf("/a still planned after Invalidate")
		}
	}
}

func TestLaunchProfileRoundTrip(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/usr/bin/prog", 1), 2: lf("/usr/lib/libc.so", 2)}
	p := &LaunchProfile{Program: lf("/root/.pyenv/shims/python3", 5), Ran: lf("/usr/bin/env", 6)}
	recordLaunch(t, p, files, []Event{acc(1100, 2, formats.KindFault, 1<<40, 3), acc(1200, 1, formats.KindRead, 0, 9)}, 5)
	recordLaunch(t, p, files, []Event{acc(1100, 1, formats.KindRead, 4, 9)}, 5)
	b := EncodeLaunchProfile(p)
	q, err := DecodeLaunchProfile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(EncodeLaunchProfile(q), b) {
		t.Fatal("decode then encode differs")
	}
	if !reflect.DeepEqual(q.Plan(), p.Plan()) {
		t.Errorf("plans differ:\n%+v\n%+v", q.Plan(), p.Plan())
	}
	// Every single-byte change is caught (the checksum, or the magic).
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := DecodeLaunchProfile(c); !errors.Is(err, ErrLaunchProfile) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	if _, err := DecodeLaunchProfile(b[:len(b)-1]); !errors.Is(err, ErrLaunchProfile) {
		t.Fatalf("truncated: %v", err)
	}
}

// withCRC appends a valid checksum to body.
func withCRC(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
}

func TestDecodeLaunchProfileNamesTheField(t *testing.T) {
	file := func(path string) []byte {
		b := binary.AppendUvarint(nil, uint64(len(path)))
		b = append(b, path...)
		for range 4 {
			b = binary.AppendUvarint(b, 1)
		}
		return binary.AppendUvarint(b, 0)
	}
	head := append([]byte(launchMagic), 1)
	head = append(head, file("/bin/x")...)
	head = append(head, file("")...)
	cases := []struct {
		body []byte
		want string
	}{
		{append(append([]byte(launchMagic), 2), 0), "version 2"},
		{append(append(append([]byte(launchMagic), 1), file("rel")...), file("")...), "field program.path"},
		{append(append(bytes.Clone(head), 1), file("")...), "field files[0].path"},
		{append(bytes.Clone(head), 0xff, 0xff, 0xff, 0xff, 0x0f), "field files"},
		// one file, one launch, one touch naming file 3
		{append(append(append(bytes.Clone(head), 1), file("/f")...), 1, 0, 0, 1, 3, 0, 0, 0), "field launches[0].touches[0].file"},
		// a range of 0 pages
		{append(append(append(bytes.Clone(head), 1), file("/f")...), 1, 0, 0, 1, 0, 0, 0, 1, 0, 0), "launches[0].touches[0].ranges[0]"},
		// a range before page 0
		{append(append(append(bytes.Clone(head), 1), file("/f")...), 1, 0, 0, 1, 0, 0, 0, 1, 1, 1), "launches[0].touches[0].ranges[0]"},
		{append(append(append(bytes.Clone(head), 1), file("/f")...), 0, 9), "bytes after the last launch"},
	}
	for _, c := range cases {
		_, err := DecodeLaunchProfile(withCRC(c.body))
		if !errors.Is(err, ErrLaunchProfile) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error with %q, got %v", c.want, err)
		}
	}
}

func FuzzDecodeLaunchProfile(f *testing.F) {
	files := map[uint32]LaunchFile{1: lf("/usr/bin/prog", 1), 2: lf("/usr/lib/libc.so", 2)}
	p := &LaunchProfile{Program: lf("/usr/bin/prog", 1)}
	r := NewLaunchRecorder(0)
	for _, ev := range []Event{acc(5, 1, formats.KindRead, 0, 4), acc(9, 2, formats.KindFault, 77, 1)} {
		r.Observe(&ev)
	}
	l, fs := r.Launch(func(id uint32) (LaunchFile, bool) { f, ok := files[id]; return f, ok }, 1, 2)
	_ = p.AddLaunch(l, fs, 3)
	f.Add(EncodeLaunchProfile(p))
	f.Add(EncodeLaunchProfile(&LaunchProfile{Program: lf("/x", 1)}))
	f.Add([]byte(launchMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeLaunchProfile(b)
		if err != nil {
			if !errors.Is(err, ErrLaunchProfile) {
				t.Fatalf("error does not wrap ErrLaunchProfile: %v", err)
			}
			return
		}
		if !bytes.Equal(EncodeLaunchProfile(p), b) {
			t.Fatal("a valid profile does not encode to its bytes")
		}
		p.Plan()
	})
}

// launchEnv names profile files by an id per path; skip lists paths
// LaunchFile refuses.
func launchEnv(m *LaunchModel, skip ...string) (Env, map[uint32]string) {
	ids := map[string]uint32{}
	names := map[uint32]string{}
	return Env{
		Launch: m,
		FileKey: func(id uint32) (FileKey, bool) {
			if n, ok := names[id]; ok {
				return FileKey{Path: n}, true
			}
			return FileKey{}, false
		},
		LaunchFile: func(pid uint32, st *LaunchStep) (uint32, bool) {
			f := st.File
			for _, s := range skip {
				if f.Path == s {
					return 0, false
				}
			}
			id, ok := ids[f.Path]
			if !ok {
				id = uint32(100 + len(ids))
				ids[f.Path] = id
				names[id] = f.Path
			}
			return id, true
		},
		MaxPages: 4,
	}, names
}

func TestLaunchPolicyPrefetchesThePlan(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/usr/bin/prog", 1), 2: lf("/lib/a.so", 2), 3: lf("/etc/x", 3), 4: lf("/lib/b.so", 4)}
	p := &LaunchProfile{Program: files[1]}
	recordLaunch(t, p, files, []Event{
		acc(1100, 1, formats.KindRead, 0, 2),
		acc(1200, 2, formats.KindFault, 0, 10), // 10 pages: 3 requests of at most 4
		acc(1300, 3, formats.KindStat, 0, 0),
		acc(1400, 4, formats.KindRead, 0, 1),
	}, 3)
	env, names := launchEnv(NewLaunchModel(p), "/lib/b.so")
	pol, err := Build("launch:chunk=4", env)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	emit := func(r *Request) {
		s := names[r.File]
		if r.Meta {
			s += " meta"
		}
		for _, rg := range r.Ranges {
			s += " " + strings.Repeat("p", int(rg.N))
		}
		got = append(got, s)
	}
	d := NewDispatcher(pol)
	ev := Event{Kind: EventProcessExec, PID: 9, Exec: ProcessExec{Path: "/usr/bin/prog"}}
	d.Dispatch(&ev, emit)
	want := []string{"/usr/bin/prog meta pp", "/lib/a.so meta pppp", "/lib/a.so pppp", "/lib/a.so pp", "/etc/x meta"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("requests\n%q\nwant\n%q", got, want)
	}
	// The same process executing again (a shim's exec chain) does not
	// prefetch twice; another process does.
	got = nil
	d.Dispatch(&ev, emit)
	if len(got) != 0 {
		t.Errorf("second exec of pid 9 prefetched again: %q", got)
	}
	ev.PID = 10
	d.Dispatch(&ev, emit)
	if len(got) != len(want) {
		t.Errorf("pid 10: %d requests, want %d", len(got), len(want))
	}
	// Budgets: 3 pages in all, meta off.
	pol, _ = Build("launch:pages=3,meta=off,chunk=4", env)
	got = nil
	pol.Handle(&ev, emit)
	if want := []string{"/usr/bin/prog pp", "/lib/a.so p"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pages=3: %q, want %q", got, want)
	}
	pol, _ = Build("launch:files=1", env)
	got = nil
	pol.Handle(&ev, emit)
	if len(got) != 1 {
		t.Errorf("files=1: %q", got)
	}
	// An unknown program prefetches nothing.
	got = nil
	pol.Handle(&Event{Kind: EventProcessExec, PID: 11, Exec: ProcessExec{Path: "/usr/bin/other"}}, emit)
	if len(got) != 0 {
		t.Errorf("unknown program: %q", got)
	}
}

func TestLaunchPolicySeenAndRanAlias(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/a", 1), 2: lf("/b", 2)}
	p := &LaunchProfile{Program: lf("/root/.pyenv/shims/python3", 5), Ran: lf("/usr/bin/env", 6)}
	recordLaunch(t, p, files, []Event{acc(1, 1, formats.KindRead, 0, 1), acc(2, 2, formats.KindRead, 0, 1)}, 3)
	recordLaunch(t, p, files, []Event{acc(1, 1, formats.KindRead, 0, 1)}, 3)
	env, names := launchEnv(NewLaunchModel(p))
	pol, err := Build("launch:seen=2", env)
	if err != nil {
		t.Fatal(err)
	}
	// A bundle's exec row names the interpreter the kernel ran.
	names[50] = "/usr/bin/env"
	var got []string
	pol.Handle(&Event{Kind: EventProcessExec, PID: 1, File: 50}, func(r *Request) { got = append(got, names[r.File]) })
	if !reflect.DeepEqual(got, []string{"/a"}) {
		t.Errorf("seen=2 by the Ran alias: %q, want only /a", got)
	}
}

func TestLaunchPolicyNeedsProfiles(t *testing.T) {
	if _, err := Build("launch", Env{}); err == nil || !strings.Contains(err.Error(), "predictio run --profile") {
		t.Errorf("no model: %v", err)
	}
	dir := t.TempDir()
	p := &LaunchProfile{Program: lf("/usr/bin/prog", 1)}
	if err := os.WriteFile(filepath.Join(dir, LaunchProfileName(p.Program.Path)), EncodeLaunchProfile(p), 0o600); err != nil {
		t.Fatal(err)
	}
	env, _ := launchEnv(nil)
	env.Launch = nil
	pol, err := Build("launch:profile="+dir, env)
	if err != nil {
		t.Fatal(err)
	}
	if pol.(*launchPolicy).model.Get("/usr/bin/prog") == nil {
		t.Error("profile= did not load the directory's profile")
	}
	os.WriteFile(filepath.Join(dir, "bad"+LaunchProfileExt), []byte("junk"), 0o600)
	if _, err := Build("launch:profile="+dir, env); !errors.Is(err, ErrLaunchProfile) || !strings.Contains(err.Error(), "bad.launch") {
		t.Errorf("damaged profile: %v", err)
	}
}

func TestLaunchProfileName(t *testing.T) {
	a, b := LaunchProfileName("/usr/bin/python3"), LaunchProfileName("/usr/local/bin/python3")
	if a == b || !strings.HasPrefix(a, "python3-") || !strings.HasSuffix(a, LaunchProfileExt) {
		t.Errorf("names %q %q", a, b)
	}
	if n := LaunchProfileName("/x/" + strings.Repeat("é", 100)); len(n) > 100 || strings.ContainsAny(n, "/é") {
		t.Errorf("long name %q", n)
	}
}

func TestLaunchProfileTrainsMarkov(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/data", 1)}
	p := &LaunchProfile{Program: lf("/usr/bin/x", 9)}
	for range 2 {
		recordLaunch(t, p, files, []Event{
			acc(1, 1, formats.KindRead, 40, 1), acc(2, 1, formats.KindRead, 41, 1), // one range 40+2
			acc(3, 1, formats.KindRead, 7, 1), acc(4, 1, formats.KindRead, 90, 1),
		}, 3)
	}
	if r := p.Launches[0].Touches[0].Ranges; !reflect.DeepEqual(r, []Range{{40, 2}, {7, 1}, {90, 1}}) {
		t.Fatalf("touch keeps the access order: %v", r)
	}
	m := p.Markov(4096)
	data := files[1]
	fm, err := m.Lookup(data.Key())
	if err != nil || fm == nil {
		t.Fatalf("no model for /data: %v", err)
	}
	for _, c := range [][2]uint64{{40, 41}, {41, 7}, {7, 90}} {
		ts := fm.Next(c[0])
		if len(ts) != 1 || ts[0].Next != c[1] || ts[0].P != 1 {
			t.Errorf("transitions from %d: %+v, want %d", c[0], ts, c[1])
		}
	}
	if m.Runs != 2 {
		t.Errorf("runs %d", m.Runs)
	}
}

func TestLaunchProfileWants(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/a", 1), 2: lf("/b", 2)}
	p := &LaunchProfile{Program: lf("/usr/bin/x", 9)}
	now := time.Now()
	if !p.Wants(2, time.Hour, now) {
		t.Error("an empty profile does not want a launch")
	}
	recordLaunch(t, p, files, []Event{acc(1, 1, formats.KindRead, 0, 1), acc(2, 2, formats.KindRead, 0, 1)}, 2)
	recordLaunch(t, p, files, []Event{acc(1, 1, formats.KindRead, 0, 1), acc(2, 2, formats.KindRead, 0, 1)}, 2)
	p.Launches[0].StartUnixNS, p.Launches[1].StartUnixNS = now.Add(-2*time.Hour).UnixNano(), now.Add(-time.Minute).UnixNano()
	switch {
	case p.Wants(2, time.Hour, now):
		t.Error("a full, fresh profile wants a launch")
	case !p.Wants(2, 30*time.Second, now):
		t.Error("a full profile older than refresh does not want a launch")
	case !p.Wants(2, 0, now):
		t.Error("refresh 0 does not learn every launch")
	case p.Wants(2, -1, now.Add(1000*time.Hour)):
		t.Error("negative refresh learns a full profile")
	}
	changed := lf("/b", 2)
	if !p.InvalidateFiles([]LaunchFile{changed}) || len(p.Launches) != 1 || !p.Wants(2, time.Hour, now) {
		t.Errorf("after an invalidation: %d launches, wants %v", len(p.Launches), p.Wants(2, time.Hour, now))
	}
	for _, s := range p.Plan() {
		if s.File.Path == "/b" {
			t.Error("/b still planned")
		}
	}
}

func TestLaunchPolicyLeavesLargeSequentialFilesToReadahead(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/db", 1), 2: lf("/mapped", 2)}
	p := &LaunchProfile{Program: lf("/usr/bin/x", 9)}
	var evs []Event
	for pg := uint64(0); pg < 100; pg += 10 {
		evs = append(evs, acc(pg+1, 1, formats.KindRead, pg, 10)) // front to back
	}
	evs = append(evs, acc(200, 2, formats.KindFault, 50, 50), acc(201, 2, formats.KindFault, 0, 50)) // not ascending
	pages := seqLimitPages(t, p, files, evs)
	if pages["/db"] != 0 || pages["/mapped"] != 100 {
		t.Errorf("pages prefetched %v: want none of the sequential /db and all of /mapped (100)", pages)
	}
}

// seqLimitPages records evs as a launch of p over files and returns the
// pages launch:seqlimit=64,chunk=8 prefetches of each file at the next
// exec, by path.
func seqLimitPages(t *testing.T, p *LaunchProfile, files map[uint32]LaunchFile, evs []Event) map[string]uint64 {
	t.Helper()
	recordLaunch(t, p, files, evs, 3)
	env, names := launchEnv(NewLaunchModel(p))
	pol, err := Build("launch:seqlimit=64,chunk=8,meta=off", env)
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]uint64{}
	pol.Handle(&Event{Kind: EventProcessExec, PID: 1, Exec: ProcessExec{Path: "/usr/bin/x"}}, func(r *Request) {
		pages[names[r.File]] += rangePages(r.Ranges)
	})
	return pages
}

// TestLaunchPolicyTableScanIsSequential: a table scan that reads each
// run of leaves after the interior page above it, at a higher offset
// (what sqlite3 does), is a front-to-back read, left to readahead;
// scattered runs are not.
func TestLaunchPolicyTableScanIsSequential(t *testing.T) {
	files := map[uint32]LaunchFile{1: lf("/db", 1), 2: lf("/index", 2)}
	p := &LaunchProfile{Program: lf("/usr/bin/x", 9)}
	evs := []Event{acc(1, 1, formats.KindRead, 0, 2)}
	ts := uint64(2)
	for run := uint64(0); run < 3; run++ {
		evs = append(evs, acc(ts, 1, formats.KindRead, 500+run, 1)) // the interior page
		ts++
		for pg := 2 + 100*run; pg < 2+100*(run+1); pg += 10 {
			evs = append(evs, acc(ts, 1, formats.KindRead, pg, 10))
			ts++
		}
	}
	for _, first := range []uint64{200, 0, 100} { // long runs, out of order
		evs = append(evs, acc(ts, 2, formats.KindRead, first, 50))
		ts++
	}
	pages := seqLimitPages(t, p, files, evs)
	if pages["/db"] != 0 || pages["/index"] != 150 {
		t.Errorf("pages prefetched %v: want none of the scanned /db and all of /index (150)", pages)
	}
}

// TestLaunchProfileOnePathTwice: a launch that touched one path as two
// files (it did not exist, then did) touches the profile's file once,
// and the profile still decodes.
func TestLaunchProfileOnePathTwice(t *testing.T) {
	p := &LaunchProfile{Program: lf("/usr/bin/x", 9)}
	l := Launch{Touches: []LaunchTouch{
		{File: 0, FirstNS: 5, Kinds: 1 << formats.KindStat},
		{File: 1, FirstNS: 9, Kinds: 1 << formats.KindRead, Ranges: []Range{{0, 2}}},
	}}
	missing := LaunchFile{Path: "/tmp/late"}
	present := lf("/tmp/late", 4)
	if err := p.AddLaunch(l, []LaunchFile{missing, present}, 3); err != nil {
		t.Fatal(err)
	}
	if len(p.Files) != 1 || len(p.Launches[0].Touches) != 1 {
		t.Fatalf("%d files, %d touches; want 1 and 1", len(p.Files), len(p.Launches[0].Touches))
	}
	tc := p.Launches[0].Touches[0]
	if tc.FirstNS != 5 || !Has(tc.Kinds, formats.KindStat) || !Has(tc.Kinds, formats.KindRead) || len(tc.Ranges) != 1 {
		t.Errorf("merged touch %+v", tc)
	}
	if _, err := DecodeLaunchProfile(EncodeLaunchProfile(p)); err != nil {
		t.Fatal(err)
	}
}
