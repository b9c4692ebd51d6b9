package adapters

import (
	"errors"
	"fmt"
	"slices"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// Stats are a Stage's counters.
type Stats struct {
	Accesses     uint64 // FileAccess events handled by an adapter
	Recognized   uint64 // files an adapter recognized
	Unrecognized uint64 // files no adapter recognized (their header was read once)
	OpenErrors   uint64 // files Files refused or failed to open; never retried
	Dropped      uint64 // recognized files whose state was dropped (MaxFiles, Forget)
	TreeEvents   uint64 // TreeChildEnter events derived
	TensorEvents uint64 // TensorLayout events derived
	// Reads counts the adapters' read calls. The pages they read are
	// counted once per read: PagesHit were within the access being
	// handled (the program had just read them: page-cache hits),
	// PagesEarlier were read by the program earlier (GGUF metadata read
	// sequentially, SQLite table interior pages read again), PagesCached
	// were read only because the page cache held them (Config.ReadCached:
	// no I/O), and PagesIO are any others, which may have cost I/O (a
	// header read when the first access to a file is not its first page,
	// or a page read by an access that covered it only in part).
	Reads, PagesHit, PagesEarlier, PagesCached, PagesIO uint64
	// Malformed counts pages, cells and fields the parsers rejected.
	Malformed uint64
	// Lookups counts the table leaves read that the SQLite adapter
	// matched to an entry of an index page being scanned (the table
	// lookups of an index scan).
	Lookups uint64
}

// FileStatus describes a recognized file.
type FileStatus struct {
	File    uint32
	Adapter string
	// Detail summarizes what the adapter found, e.g. the page size, the
	// journal mode or the tensor count.
	Detail string
}

// Sink receives a derived event and the name of the adapter that derived
// it. The event and its slices are valid only during the call.
type Sink func(ev *policies.Event, adapter string)

// Stage runs adapters on FileAccess events. It is not safe for concurrent
// use; its steady state allocates nothing per event.
type Stage struct {
	cfg     Config
	files   Files
	enabled []string
	states  map[uint32]*fileState
	skip    map[uint32]struct{}
	clock   uint64
	st      Stats
	r       reader
	out     output
	acc     access
	hdr     []byte

	d        *policies.Dispatcher // set during Dispatch
	emit     policies.Emit
	dispatch Sink
}

// maxSkip bounds the set of files known to be unrecognized; when it is
// full it is cleared, and those files' headers are read once more.
const maxSkip = 1 << 16

// headerSize is how much of a file recognition reads: its first page.
const headerSize = 4096

type fileState struct {
	id      uint32
	adapter string
	p       parser
	c       Content
	used    uint64
}

// parser is one recognized file's adapter state.
type parser interface {
	// handle processes an access to the file.
	handle(a *access, r *reader, o *output)
	// status summarizes the file for FileStatus.Detail.
	status() string
}

// access is the FileAccess being handled, in pages of the Stage's page
// size.
type access struct {
	first, n uint64
	kind     formats.AccessKind
}

// NewStage returns a stage that reads file content through files.
func NewStage(cfg Config, files Files) (*Stage, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if files == nil && len(cfg.Adapters) > 0 {
		return nil, errors.New("configure adapters: no Files to read content through")
	}
	s := &Stage{
		cfg:     cfg,
		files:   files,
		enabled: cfg.Adapters,
		states:  map[uint32]*fileState{},
		skip:    map[uint32]struct{}{},
		hdr:     make([]byte, headerSize),
	}
	s.dispatch = s.toDispatcher
	return s, nil
}

// Adapters returns the names of the adapters the stage runs.
func (s *Stage) Adapters() []string { return slices.Clone(s.enabled) }

// Process runs the adapters on ev and passes every event they derive from
// it to sink, in order, before returning. Only FileAccess events of the
// demand kinds read, fault and map are examined; the first access to a
// file reads its header once to recognize it.
func (s *Stage) Process(ev *policies.Event, sink Sink) {
	if ev.Kind != policies.EventFileAccess || len(s.enabled) == 0 {
		return
	}
	switch ev.Access.Kind {
	case formats.KindRead, formats.KindFault, formats.KindMap:
	default:
		return
	}
	if _, no := s.skip[ev.File]; no {
		return
	}
	a := &s.acc // a field, not a local: passed to an interface method it would escape
	*a = access{first: ev.Access.Page, n: max(uint64(ev.Access.NPages), 1), kind: ev.Access.Kind}
	if a.first+a.n < a.first {
		return
	}
	s.r = reader{ps: uint64(s.cfg.PageSize), first: a.first, end: a.first + a.n, st: &s.st}
	f := s.states[ev.File]
	if f == nil {
		late := s.cfg.HeaderFirst && a.first != 0
		if late && !s.cfg.ReadCached || s.readWhole(ev.File, a) {
			return
		}
		if f = s.recognize(ev, late); f == nil {
			return
		}
	}
	s.clock++
	f.used = s.clock
	s.st.Accesses++
	s.r.c = f.c
	s.out = output{src: ev, name: f.adapter, sink: sink, st: &s.st, warn: s.cfg.Warn}
	f.p.handle(a, &s.r, &s.out)
	s.out = output{}
	s.r = reader{}
}

// readWhole reports whether a, an access to file's first page, covered
// all of the file (FileSizes). The file is not skipped from then on: one
// that has grown is recognized at a later access.
func (s *Stage) readWhole(file uint32, a *access) bool {
	fs, ok := s.files.(FileSizes)
	if !ok || a.first != 0 {
		return false
	}
	size, ok := fs.FileSize(file)
	return ok && size > 0 && a.n*s.r.ps >= size
}

// Dispatch hands ev to d and then the events the adapters derive from it.
func (s *Stage) Dispatch(d *policies.Dispatcher, ev *policies.Event, emit policies.Emit) {
	d.Dispatch(ev, emit)
	s.d, s.emit = d, emit
	s.Process(ev, s.dispatch)
	s.d, s.emit = nil, nil
}

func (s *Stage) toDispatcher(ev *policies.Event, _ string) { s.d.Dispatch(ev, s.emit) }

// Stats returns the stage's counters.
func (s *Stage) Stats() Stats { return s.st }

// Status returns the recognized files, by file id.
func (s *Stage) Status() []FileStatus {
	out := make([]FileStatus, 0, len(s.states))
	for _, f := range s.states {
		out = append(out, FileStatus{File: f.id, Adapter: f.adapter, Detail: f.p.status()})
	}
	slices.SortFunc(out, func(a, b FileStatus) int { return int(a.File) - int(b.File) })
	return out
}

// Recognized reports whether an adapter recognized file (and its state
// is kept).
func (s *Stage) Recognized(file uint32) bool {
	_, ok := s.states[file]
	return ok
}

// Forget drops what the stage knows about file, closing its content; a
// source calls it when it reuses or drops a file id.
func (s *Stage) Forget(file uint32) {
	delete(s.skip, file)
	if f := s.states[file]; f != nil {
		s.drop(f)
	}
}

// Close drops every file's state and closes their content.
func (s *Stage) Close() error {
	var errs []error
	for _, f := range s.states {
		errs = append(errs, s.drop(f))
	}
	clear(s.skip)
	return errors.Join(errs...)
}

func (s *Stage) drop(f *fileState) error {
	delete(s.states, f.id)
	s.st.Dropped++
	return f.c.Close()
}

func (s *Stage) addSkip(file uint32) {
	if len(s.skip) >= maxSkip {
		clear(s.skip)
	}
	s.skip[file] = struct{}{}
}

// recognize opens ev's file, reads its header and asks each enabled
// adapter whether it knows the format. A file that cannot be opened or is
// not recognized is skipped from then on. With cached (Config.HeaderFirst
// and ReadCached, at a first access that is not to the header: the
// program's read of the header was not seen, as when tracing started
// after it) the header is read only if it is in the page cache, else the
// file is skipped too.
func (s *Stage) recognize(ev *policies.Event, cached bool) *fileState {
	c, err := s.files.Open(ev.File, ev.PID)
	if err != nil {
		s.st.OpenErrors++
		s.addSkip(ev.File)
		return nil
	}
	s.r.c = c
	var hdr []byte
	if cached {
		n := min(int64(len(s.hdr)), max(c.Size(), 0))
		if ok, _ := s.r.readCached(s.hdr[:n], 0); !ok || n == 0 {
			c.Close()
			s.addSkip(ev.File)
			return nil
		}
		hdr = s.hdr[:n]
	} else {
		n, _ := c.ReadAt(s.hdr, 0)
		s.r.account(0, max(n, 0))
		hdr = s.hdr[:max(n, 0)]
	}
	size := s.r.size()
	for _, name := range s.enabled {
		p, err := s.open(name, hdr, size)
		if p == nil && err == nil {
			continue
		}
		if err != nil {
			s.warn(fmt.Sprintf("adapters: file %d: %v", ev.File, err))
			break
		}
		if len(s.states) >= s.cfg.MaxFiles {
			s.evict()
		}
		f := &fileState{id: ev.File, adapter: name, p: p, c: c}
		s.states[ev.File] = f
		s.st.Recognized++
		return f
	}
	c.Close()
	s.st.Unrecognized++
	s.addSkip(ev.File)
	return nil
}

// open returns the parser of adapter name for a file with header hdr, nil
// and no error when the header is not that adapter's format, or an error
// when it is that format but cannot be handled (an unsupported version).
func (s *Stage) open(name string, hdr []byte, size uint64) (parser, error) {
	switch name {
	case SQLite:
		return newSQLite(hdr, size, &s.cfg)
	case LMDB:
		return newLMDB(hdr, size, &s.cfg)
	case GGUF:
		return newGGUF(hdr, size, &s.cfg)
	}
	return nil, nil
}

func (s *Stage) evict() {
	var victim *fileState
	for _, f := range s.states {
		if victim == nil || f.used < victim.used {
			victim = f
		}
	}
	if victim != nil {
		s.drop(victim)
	}
}

func (s *Stage) warn(msg string) {
	if s.cfg.Warn != nil {
		s.cfg.Warn(msg)
	}
}

// output builds derived events for a parser.
type output struct {
	src  *policies.Event
	name string
	sink Sink
	st   *Stats
	warn func(string)
	ev   policies.Event
}

// tree emits a TreeChildEnter event.
func (o *output) tree(parent uint64, pos uint32, children []uint64) {
	if len(children) == 0 {
		return
	}
	o.ev = policies.Event{Kind: policies.EventTreeChildEnter, TS: o.src.TS, PID: o.src.PID, TID: o.src.TID, File: o.src.File,
		Tree: policies.TreeChildEnter{ParentPage: parent, Position: pos, Children: children}}
	o.st.TreeEvents++
	o.sink(&o.ev, o.name)
}

// tensor emits a TensorLayout event.
func (o *output) tensor(name string, off, length uint64) {
	o.ev = policies.Event{Kind: policies.EventTensorLayout, TS: o.src.TS, PID: o.src.PID, TID: o.src.TID, File: o.src.File,
		Tensor: policies.TensorLayout{Name: name, Offset: off, Length: length}}
	o.st.TensorEvents++
	o.sink(&o.ev, o.name)
}

// warnf sends a warning about the file being handled.
func (o *output) warnf(format string, args ...any) {
	if o.warn != nil {
		o.warn(fmt.Sprintf("adapters: %s: file %d: ", o.name, o.src.File) + fmt.Sprintf(format, args...))
	}
}

// ToHint sets h to the hints.arrow row of an event the adapter derived,
// with its source (Source(adapter)), and reports whether ev is of a kind
// that has one. The children slice is shared with ev.
func ToHint(ev *policies.Event, adapter string, h *formats.Hint) bool {
	*h = formats.Hint{TS: ev.TS, PID: ev.PID, TID: ev.TID, FileID: ev.File, Source: Source(adapter)}
	switch ev.Kind {
	case policies.EventTreeChildEnter:
		h.Kind = formats.HintTreeChildEnter
		h.ParentPage, h.Position, h.Children = ev.Tree.ParentPage, ev.Tree.Position, ev.Tree.Children
	case policies.EventTensorLayout:
		h.Kind = formats.HintTensorLayout
		h.Name, h.OffsetBytes, h.LengthBytes = ev.Tensor.Name, ev.Tensor.Offset, ev.Tensor.Length
	default:
		return false
	}
	return true
}
