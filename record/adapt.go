package record

import (
	"fmt"
	"os"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/source"
)

// adapterStage runs the structure adapters (package adapters) on the
// accesses the source delivers, in the decoder's goroutine, and appends
// the events they derive to the bundle's hints table with their source
// (adapter:NAME) and thread: simulate and replay of the bundle then need
// no database. Files are read as the accessing process could
// (source.ProcessFiles), never through the page cache's state alone
// (adapters.Config.ReadCached stays off: what a recording derives must
// not depend on what happened to be cached).
type adapterStage struct {
	st    *adapters.Stage
	w     bundleWriter
	files *recordFiles
	sink  adapters.Sink
	// headed holds the files the program has read the first page of: only
	// their accesses reach the adapters, whose recognition reads that
	// page (a page the program read itself). A file first read elsewhere
	// waits for its first page: reading it for the program would change
	// what the program then finds in the page cache, and so the recording.
	// The three formats' readers all read their header first.
	headed map[uint32]struct{}
	ev     policies.Event
	h      formats.Hint
	err    error
	hints  uint64
	warns  []string
}

// maxHeaded bounds adapterStage.headed; when it is full it is cleared,
// and those files wait for their first page again.
const maxHeaded = 1 << 20

// maxAdapterNotes bounds the adapters' warnings kept for the manifest.
const maxAdapterNotes = 32

// newAdapterStage returns the stage of the adapters names (none: nil)
// reading src's files for w.
func newAdapterStage(names []string, src *source.Source, w bundleWriter) (*adapterStage, error) {
	if len(names) == 0 {
		return nil, nil
	}
	a := &adapterStage{w: w, files: &recordFiles{src: src}, headed: map[uint32]struct{}{}}
	st, err := adapters.NewStage(adapters.Config{Adapters: names, Warn: a.warn}, a.files)
	if err != nil {
		a.close()
		return nil, fmt.Errorf("start adapters: %w", err)
	}
	a.st = st
	a.sink = a.write
	return a, nil
}

// access runs the adapters on one access row. A derived event's ts_ns is
// the access's completion (end_ns, where the row has one): the adapter
// reads what the program's read brought in, which exists only once it
// returned.
func (a *adapterStage) access(acc *formats.Access) error {
	switch acc.Kind {
	case formats.KindRead, formats.KindFault, formats.KindMap:
	default:
		return nil
	}
	if _, ok := a.headed[acc.FileID]; !ok {
		if acc.FirstPage != 0 {
			return nil
		}
		if len(a.headed) >= maxHeaded {
			clear(a.headed)
		}
		a.headed[acc.FileID] = struct{}{}
	}
	a.ev.FromAccess(acc)
	if acc.EndNS > acc.TS {
		a.ev.TS = acc.EndNS
	}
	a.st.Process(&a.ev, a.sink)
	err := a.err
	a.err = nil
	return err
}

func (a *adapterStage) write(ev *policies.Event, adapter string) {
	if a.err != nil || !adapters.ToHint(ev, adapter, &a.h) {
		return
	}
	if a.err = a.w.AppendHint(&a.h); a.err == nil {
		a.hints++
	}
}

func (a *adapterStage) warn(msg string) {
	if len(a.warns) < maxAdapterNotes {
		a.warns = append(a.warns, msg)
	}
}

// close closes the files the adapters hold open and the access checker.
func (a *adapterStage) close() {
	if a.st != nil {
		a.st.Close()
	}
	a.files.close()
}

// stats returns the adapters' counters and the hints written.
func (a *adapterStage) stats() (adapters.Stats, uint64) {
	if a == nil || a.st == nil {
		return adapters.Stats{}, 0
	}
	return a.st.Stats(), a.hints
}

// recordFiles is source.ProcessFiles with an access checker started the
// first time a file is read for a process of another user (a thread of
// its own; most recordings never need one). Without CAP_SETUID and
// CAP_SETGID there is none, and only files of processes running as root
// or as this process's user are read.
type recordFiles struct {
	src   *source.Source
	creds source.ProcCreds
	ac    *source.AccessChecker
	tried bool
}

// FileSize returns file's size when the recorder first saw it.
func (f *recordFiles) FileSize(file uint32) (uint64, bool) {
	return source.ProcessFiles{Src: f.src}.FileSize(file)
}

func (f *recordFiles) Open(file, pid uint32) (adapters.Content, error) {
	if !f.tried && pid != 0 {
		if _, c, err := f.creds.Process(pid); err == nil && c.UID != 0 && c.UID != uint32(os.Geteuid()) {
			f.tried = true
			f.ac, _ = source.NewAccessChecker()
		}
	}
	return source.ProcessFiles{Src: f.src, Access: f.ac, Creds: &f.creds}.Open(file, pid)
}

func (f *recordFiles) close() {
	if f.ac != nil {
		f.ac.Close()
		f.ac = nil
	}
}
