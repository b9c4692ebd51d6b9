package formats

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// maxPerProblem bounds how many occurrences of one kind of problem Verify
// lists before summarizing the rest.
const maxPerProblem = 20

type problems struct {
	errs   []error
	counts map[string]int
}

func (p *problems) add(kind string, format string, args ...any) {
	if p.counts == nil {
		p.counts = map[string]int{}
	}
	p.counts[kind]++
	if p.counts[kind] <= maxPerProblem {
		p.errs = append(p.errs, fmt.Errorf(format, args...))
	}
}

func (p *problems) addErr(err error) { p.errs = append(p.errs, err) }

func (p *problems) result() []error {
	for kind, n := range p.counts {
		if n > maxPerProblem {
			p.errs = append(p.errs, fmt.Errorf("%s: %d more like this (%d in all)", kind, n-maxPerProblem, n))
		}
	}
	return p.errs
}

// Verify checks a bundle and returns every problem found; nil means the
// bundle is sound. It checks the manifest and format version, each table's
// size, row count and SHA-256 against the manifest, the integrity of every
// message (docs/format.md, Integrity), the schemas, that every batch
// decodes, access and hint kinds and the rules of each kind's columns, that
// timestamps lie within the recording's start and end (when recorded), that
// file_id references exist and are unique, and that read, fault and map
// accesses lie within the file's size. One kind of problem is listed at most
// 20 times, then counted. A problem caused by a writer that did not finish
// wraps ErrIncomplete, damaged data ErrCorrupt, and a reference to a file
// files.arrow lacks ErrMissingFiles.
func Verify(dir string) []error {
	var p problems
	m, err := readManifest(dir, ManifestFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, perr := os.Stat(filepath.Join(dir, PartialManifestFile)); perr == nil {
				return []error{fmt.Errorf("%s: missing, but %s exists: the writer did not finish; run 'predictio trace repair %s': %w", ManifestFile, PartialManifestFile, dir, ErrIncomplete)}
			}
			return []error{fmt.Errorf("%s: %w", ManifestFile, err)}
		}
		return []error{err}
	}
	if err := checkVersion(m.FormatVersion); err != nil {
		return []error{fmt.Errorf("%s: %w", ManifestFile, err)}
	}
	verifyChecksums(&p, dir, m)
	b := &Bundle{dir: dir, man: *m, verify: true}
	v := &verifier{p: &p, m: m, pageSize: uint64(m.Host.PageSize), start: m.Start.MonotonicNS, end: m.End.MonotonicNS}
	if v.pageSize == 0 {
		v.pageSize = 4096
	}
	v.files(b)
	v.accesses(b)
	v.hints(b)
	return p.result()
}

// verifyChecksums compares each table's size and SHA-256 with the manifest.
func verifyChecksums(p *problems, dir string, m *Manifest) {
	for _, name := range []string{FilesFile, AccessesFile, HintsFile} {
		path := filepath.Join(dir, name)
		ti, listed := m.Tables[name]
		sum, size, err := fileSHA256(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && name == HintsFile && !listed {
				continue
			}
			p.addErr(fmt.Errorf("%s: %w", name, err))
			continue
		}
		if !listed {
			p.add("manifest", "%s: field tables[%q] is missing", ManifestFile, name)
			continue
		}
		if ti.Bytes != size {
			p.add("size", "%s: %d bytes, manifest says %d: %w", name, size, ti.Bytes, ErrCorrupt)
		}
		if ti.SHA256 != sum {
			p.add("checksum", "%s: SHA-256 %s, manifest says %s: %w", name, sum, ti.SHA256, ErrCorrupt)
		}
	}
}

// verifier holds what Verify learned from files.arrow while it checks the
// other tables.
type verifier struct {
	p          *problems
	m          *Manifest
	pageSize   uint64
	start, end uint64
	filesOK    bool // files.arrow was read: references can be checked
	size       map[uint32]uint64
	pathOnly   map[uint32]bool
}

func (v *verifier) files(b *Bundle) {
	files, err := b.Files()
	if err != nil {
		v.p.addErr(err)
		return
	}
	v.filesOK = true
	v.size = make(map[uint32]uint64, len(files))
	v.pathOnly = map[uint32]bool{}
	for i := range files {
		f := &files[i]
		if _, dup := v.size[f.ID]; dup {
			v.p.add("files.arrow duplicate", "%s: file_id %d appears more than once", FilesFile, f.ID)
		}
		v.size[f.ID] = f.Size
		if f.PathOnly() {
			v.pathOnly[f.ID] = true
			if f.Path == "" {
				v.p.add("files.arrow path-only", "%s: file_id %d: a path-only row (ino 0, mode 0) has no path", FilesFile, f.ID)
			}
		}
	}
	checkRows(v.p, v.m, FilesFile, uint64(len(files)))
}

func (v *verifier) inRecording(table string, n, ts uint64, col string) {
	if v.end != 0 && (ts < v.start || ts > v.end) {
		v.p.add(table+" "+col, "%s: row %d: %s %d outside the recording [%d, %d]", table, n, col, ts, v.start, v.end)
	}
}

func (v *verifier) accesses(b *Bundle) {
	ac, err := b.Accesses()
	if err != nil {
		v.p.addErr(err)
		return
	}
	defer ac.Close()
	ac.withKindName = true
	var n uint64
	for ac.Next() {
		v.access(n, ac.At())
		n++
	}
	if err := ac.Err(); err != nil {
		v.p.addErr(err)
	}
	if ac.kindNameErrs > 0 {
		v.p.add("accesses.arrow kind_name", "%s: %d rows have a kind_name that is not the name of their kind", AccessesFile, ac.kindNameErrs)
	}
	checkRows(v.p, v.m, AccessesFile, n)
}

// access checks one access row (row n).
func (v *verifier) access(n uint64, a *Access) {
	const t = AccessesFile
	p := v.p
	switch {
	case !a.Kind.Valid():
		p.add(t+" kind", "%s: row %d: kind %d is not defined", t, n, a.Kind)
	case a.Kind.Metadata() && a.NPages != 0:
		p.add(t+" npages", "%s: row %d: npages is %d, a %s row covers no pages (0)", t, n, a.NPages, a.Kind)
	case a.Kind.Pages() && a.NPages == 0:
		p.add(t+" npages", "%s: row %d: npages is 0", t, n)
	}
	v.inRecording(t, n, a.TS, "ts_ns")
	if a.EndNS != 0 {
		if a.EndNS < a.TS {
			p.add(t+" end_ns", "%s: row %d: end_ns %d before ts_ns %d", t, n, a.EndNS, a.TS)
		}
		v.inRecording(t, n, a.EndNS, "end_ns")
	}
	v.mapping(n, a)
	if !v.filesOK {
		return
	}
	size, ok := v.size[a.FileID]
	switch {
	case !ok:
		p.add(t+" file_id", "%s: row %d: file_id %d is not in %s: %w", t, n, a.FileID, FilesFile, ErrMissingFiles)
	case v.pathOnly[a.FileID] && a.Kind != KindOpen && a.Kind != KindStat:
		p.add(t+" path-only", "%s: row %d: a %s row references file_id %d, whose ino 0 and mode 0 make it a path-only row (a path that did not exist), which only failed open and stat rows may reference; a file that was accessed needs its ino or the type bits of its mode (formats.ModeRegular)", t, n, a.Kind, a.FileID)
	case v.pathOnly[a.FileID] && a.Ret >= 0:
		p.add(t+" path-only", "%s: row %d: a %s of path-only file_id %d succeeded (ret %d); a path that did not exist fails with -errno", t, n, a.Kind, a.FileID, a.Ret)
	case size > 0 && (a.Kind == KindRead || a.Kind == KindFault || a.Kind == KindMap):
		pages := (size + v.pageSize - 1) / v.pageSize
		if a.FirstPage >= pages || uint64(a.NPages) > pages-a.FirstPage {
			p.add(t+" pages", "%s: row %d: pages [%d, %d) beyond file_id %d's %d pages", t, n, a.FirstPage, a.FirstPage+uint64(a.NPages), a.FileID, pages)
		}
	}
}

// mapping checks the prot, map_first_page and map_pages columns.
func (v *verifier) mapping(n uint64, a *Access) {
	const t = AccessesFile
	p := v.p
	if !a.Kind.Mapping() {
		if a.Prot != 0 || a.MapFirstPage != 0 || a.MapPages != 0 {
			p.add(t+" mapping", "%s: row %d: a %s row has mapping columns (prot %d, map_first_page %d, map_pages %d); only fault, map and mmap rows do", t, n, a.Kind, a.Prot, a.MapFirstPage, a.MapPages)
		}
		return
	}
	if a.Prot&^(ProtRead|ProtWrite|ProtExec|ProtShared) != 0 {
		p.add(t+" prot", "%s: row %d: prot %#x has bits beyond PROT_READ|PROT_WRITE|PROT_EXEC|MAP_SHARED (0xf)", t, n, a.Prot)
	}
	if a.MapPages == 0 {
		return
	}
	switch {
	case a.MapFirstPage+a.MapPages < a.MapFirstPage:
		p.add(t+" mapping", "%s: row %d: mapping [%d, +%d) overflows", t, n, a.MapFirstPage, a.MapPages)
	case a.Kind == KindMmap && (a.FirstPage != a.MapFirstPage || uint64(a.NPages) != a.MapPages):
		p.add(t+" mapping", "%s: row %d: mmap row pages [%d, +%d) differ from its mapping [%d, +%d)", t, n, a.FirstPage, a.NPages, a.MapFirstPage, a.MapPages)
	case a.FirstPage < a.MapFirstPage || a.FirstPage+uint64(a.NPages) > a.MapFirstPage+a.MapPages:
		p.add(t+" mapping", "%s: row %d: %s pages [%d, +%d) outside the mapping [%d, +%d)", t, n, a.Kind, a.FirstPage, a.NPages, a.MapFirstPage, a.MapPages)
	}
}

func (v *verifier) hints(b *Bundle) {
	const t = HintsFile
	hc, err := b.Hints()
	if err != nil {
		v.p.addErr(err)
		return
	}
	defer hc.Close()
	var n uint64
	for hc.Next() {
		h := hc.At()
		if !h.Kind.Valid() {
			v.p.add(t+" kind", "%s: row %d: kind %d is not defined", t, n, h.Kind)
		}
		v.inRecording(t, n, h.TS, "ts_ns")
		if v.filesOK && h.FileID != 0 {
			if _, ok := v.size[h.FileID]; !ok {
				v.p.add(t+" file_id", "%s: row %d: file_id %d is not in %s: %w", t, n, h.FileID, FilesFile, ErrMissingFiles)
			}
		}
		if s := h.Source; s != "" && s != HintSourceApp && (!strings.HasPrefix(s, HintSourceAdapter) || len(s) == len(HintSourceAdapter)) {
			v.p.add(t+" source", "%s: row %d: source %q is neither %q nor %q followed by an adapter name", t, n, s, HintSourceApp, HintSourceAdapter)
		}
		n++
	}
	if err := hc.Err(); err != nil {
		v.p.addErr(err)
	}
	if _, listed := v.m.Tables[t]; listed {
		checkRows(v.p, v.m, t, n)
	}
}

func checkRows(p *problems, m *Manifest, name string, n uint64) {
	if ti, ok := m.Tables[name]; ok && ti.Rows != n {
		p.add("rows", "%s: %d rows, manifest says %d", name, n, ti.Rows)
	}
}

func fileSHA256(path string) (string, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), uint64(n), nil
}
