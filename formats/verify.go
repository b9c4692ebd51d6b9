package formats

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
// size, row count and SHA-256 against the manifest, the schemas, that every
// batch decodes, access and hint kinds, that timestamps lie within the
// recording's start and end (when recorded), that file_id references exist
// and are unique, and that read, fault and map accesses lie within the
// file's size. One kind of problem is listed at most 20 times, then counted.
func Verify(dir string) []error {
	var p problems
	m, err := readManifest(dir, ManifestFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, perr := os.Stat(filepath.Join(dir, PartialManifestFile)); perr == nil {
				return []error{fmt.Errorf("%s: missing, but %s exists: the writer did not finish; run 'predictio trace repair %s'", ManifestFile, PartialManifestFile, dir)}
			}
			return []error{fmt.Errorf("%s: %w", ManifestFile, err)}
		}
		return []error{err}
	}
	if err := checkVersion(m.FormatVersion); err != nil {
		return []error{fmt.Errorf("%s: %w", ManifestFile, err)}
	}
	pageSize := uint64(m.Host.PageSize)
	if pageSize == 0 {
		pageSize = 4096
	}

	// Checksums, sizes.
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
			p.add("size", "%s: %d bytes, manifest says %d", name, size, ti.Bytes)
		}
		if ti.SHA256 != sum {
			p.add("checksum", "%s: SHA-256 %s, manifest says %s", name, sum, ti.SHA256)
		}
	}

	// files.arrow
	b := &Bundle{dir: dir, man: *m}
	fileSize := map[uint32]uint64{}
	files, err := b.Files()
	if err != nil {
		p.addErr(err)
	} else {
		for _, f := range files {
			if _, dup := fileSize[f.ID]; dup {
				p.add("files.arrow duplicate", "%s: file_id %d appears more than once", FilesFile, f.ID)
			}
			fileSize[f.ID] = f.Size
		}
		checkRows(&p, m, FilesFile, uint64(len(files)))
	}
	start, end := m.Start.MonotonicNS, m.End.MonotonicNS

	// accesses.arrow
	if ac, err := b.Accesses(); err != nil {
		p.addErr(err)
	} else {
		var n uint64
		for ac.Next() {
			a := ac.At()
			if !a.Kind.Valid() {
				p.add("accesses.arrow kind", "%s: row %d: kind %d is not defined", AccessesFile, n, a.Kind)
			}
			if a.NPages == 0 {
				p.add("accesses.arrow npages", "%s: row %d: npages is 0", AccessesFile, n)
			}
			if end != 0 && (a.TS < start || a.TS > end) {
				p.add("accesses.arrow ts_ns", "%s: row %d: ts_ns %d outside the recording [%d, %d]", AccessesFile, n, a.TS, start, end)
			}
			if files != nil {
				size, ok := fileSize[a.FileID]
				if !ok {
					p.add("accesses.arrow file_id", "%s: row %d: file_id %d is not in %s", AccessesFile, n, a.FileID, FilesFile)
				} else if size > 0 && (a.Kind == KindRead || a.Kind == KindFault || a.Kind == KindMap) {
					pages := (size + pageSize - 1) / pageSize
					if a.FirstPage >= pages || uint64(a.NPages) > pages-a.FirstPage {
						p.add("accesses.arrow pages", "%s: row %d: pages [%d, %d) beyond file_id %d's %d pages", AccessesFile, n, a.FirstPage, a.FirstPage+uint64(a.NPages), a.FileID, pages)
					}
				}
			}
			n++
		}
		if err := ac.Err(); err != nil {
			p.addErr(err)
		}
		ac.Close()
		checkRows(&p, m, AccessesFile, n)
	}

	// hints.arrow
	if hc, err := b.Hints(); err != nil {
		p.addErr(err)
	} else {
		var n uint64
		for hc.Next() {
			h := hc.At()
			if !h.Kind.Valid() {
				p.add("hints.arrow kind", "%s: row %d: kind %d is not defined", HintsFile, n, h.Kind)
			}
			if end != 0 && (h.TS < start || h.TS > end) {
				p.add("hints.arrow ts_ns", "%s: row %d: ts_ns %d outside the recording [%d, %d]", HintsFile, n, h.TS, start, end)
			}
			if files != nil && h.FileID != 0 {
				if _, ok := fileSize[h.FileID]; !ok {
					p.add("hints.arrow file_id", "%s: row %d: file_id %d is not in %s", HintsFile, n, h.FileID, FilesFile)
				}
			}
			n++
		}
		if err := hc.Err(); err != nil {
			p.addErr(err)
		}
		hc.Close()
		if _, listed := m.Tables[HintsFile]; listed {
			checkRows(&p, m, HintsFile, n)
		}
	}
	return p.result()
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
