package adapters

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Files opens the files the adapters read. The Stage calls Open at most
// once per file (until the file's state is dropped), on behalf of the
// process whose access it is handling.
//
// An implementation for a runtime that runs as root must open a file only if
// process pid could read it itself, and only if it is the file the access
// was observed on (same device and inode): the hint server's sender check
// (package source) does both. PathFiles is the implementation for offline
// use.
type Files interface {
	Open(file, pid uint32) (Content, error)
}

// FileSizes is Files that knows a file's size without opening it (the
// size it had when first seen). The Stage then does not open a file
// whose first access to its first page read all of it: nothing of it is
// left to predict, and most files a program reads are read whole at once
// (11 424 of the 11 483 files grep -r read over the Go tree), where
// recognizing each cost a recorder a path walk, an open and a read, a
// third of its CPU.
type FileSizes interface {
	Files
	// FileSize returns file's size in bytes, false when unknown.
	FileSize(file uint32) (uint64, bool)
}

// Content is an open file's bytes.
type Content interface {
	io.ReaderAt
	// Size returns the file's current size in bytes, or -1 when unknown.
	Size() int64
	Close() error
}

// CachedContent is Content that can tell whether a byte range is in the
// page cache without reading it. With Config.ReadCached, the SQLite
// adapter reads a table interior page the program has not read yet once it
// is cached (the policies prefetched it), so that it can predict the
// leaves below it. OSContent implements it (cachestat, Linux 6.5).
type CachedContent interface {
	Content
	// Cached reports whether all of bytes [off, off+n) are cached; it
	// returns ErrNotSupported where the kernel cannot tell.
	Cached(off, n int64) (bool, error)
}

// ErrNotSupported is returned by CachedContent.Cached where the kernel
// lacks what it needs.
var ErrNotSupported = errors.New("not supported by this kernel")

// PathFiles opens files by path, read-only: for tests, tools and
// re-deriving events from files that were verified unchanged. It performs
// no access check of its own beyond the operating system's; Check, when
// set, is asked before a file is used.
type PathFiles struct {
	// Path returns the path of file, or false when it has none.
	Path func(file uint32) (string, bool)
	// Check, when set, may refuse an opened file on behalf of pid.
	Check func(pid uint32, f *os.File) error
}

// ErrNoPath is returned by PathFiles.Open for a file without a path.
var ErrNoPath = errors.New("no path known")

// Open opens file's path.
func (p PathFiles) Open(file, pid uint32) (Content, error) {
	if p.Path == nil {
		return nil, fmt.Errorf("open file %d: %w", file, ErrNoPath)
	}
	path, ok := p.Path(file)
	if !ok {
		return nil, fmt.Errorf("open file %d: %w", file, ErrNoPath)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if p.Check != nil {
		if err := p.Check(pid, f); err != nil {
			f.Close()
			return nil, fmt.Errorf("open %s for pid %d: %w", path, pid, err)
		}
	}
	return OSContent{f}, nil
}

// OSContent is the Content of an *os.File.
type OSContent struct{ *os.File }

// Size returns the file's size from fstat, or -1.
func (c OSContent) Size() int64 {
	st, err := c.Stat()
	if err != nil {
		return -1
	}
	return st.Size()
}

// reader reads a file's content for a parser and accounts every page it
// reads: pages within the access being handled (the program has just read
// them, so they are page-cache hits), pages the program read earlier (as
// far as the parser can tell), and any other page, which may be I/O.
type reader struct {
	c     Content
	ps    uint64 // page size of the accounting
	first uint64 // pages [first, end) of the access being handled
	end   uint64
	eLo   uint64 // pages [eLo, eHi) were read by the program before
	eHi   uint64
	st    *Stats
}

// errShort is returned for a read that ended before the bytes asked for.
var errShort = errors.New("short read")

// readAt fills p from offset off, or returns an error. Bytes past the end
// of the file are an error (errShort) like any other failure.
func (r *reader) readAt(p []byte, off uint64) error {
	if len(p) == 0 {
		return nil
	}
	if off > 1<<62 {
		return errShort
	}
	n, err := r.c.ReadAt(p, int64(off))
	r.account(off, n)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = errShort
	}
	return err
}

// readCached reads p from offset off only if the content reports all of it
// in the page cache (they count as PagesCached). It returns false when the
// bytes are not cached, the content cannot tell, or the read fails;
// unsupported is set when it can never tell.
func (r *reader) readCached(p []byte, off uint64) (ok, unsupported bool) {
	c, can := r.c.(CachedContent)
	if !can || off > 1<<62 {
		return false, !can
	}
	cached, err := c.Cached(int64(off), int64(len(p)))
	if err != nil || !cached {
		return false, errors.Is(err, ErrNotSupported)
	}
	n, err := r.c.ReadAt(p, int64(off))
	r.st.Reads++
	if n > 0 {
		r.st.PagesCached += (off+uint64(n)-1)/r.ps - off/r.ps + 1
	}
	return n == len(p) && (err == nil || err == io.EOF), false
}

// readEarlier is readAt of bytes the program read before (outside the
// access being handled, they count as PagesEarlier).
func (r *reader) readEarlier(p []byte, off uint64) error {
	lo, hi := r.eLo, r.eHi
	r.eLo, r.eHi = off/r.ps, (off+uint64(len(p))+r.ps-1)/r.ps
	err := r.readAt(p, off)
	r.eLo, r.eHi = lo, hi
	return err
}

func (r *reader) account(off uint64, n int) {
	r.st.Reads++
	if n <= 0 {
		return
	}
	first, last := off/r.ps, (off+uint64(n)-1)/r.ps
	for p := first; p <= last; p++ {
		switch {
		case p >= r.first && p < r.end:
			r.st.PagesHit++
		case p >= r.eLo && p < r.eHi:
			r.st.PagesEarlier++
		default:
			r.st.PagesIO++
		}
	}
}

// size returns the content's size, 0 when unknown.
func (r *reader) size() uint64 {
	s := r.c.Size()
	if s < 0 {
		return 0
	}
	return uint64(s)
}
