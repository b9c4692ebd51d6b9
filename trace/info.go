package trace

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/predictio/predictio/formats"
)

// FileCount is one entry of Summary.TopFiles.
type FileCount struct {
	FileID   uint32 `json:"file_id"`
	Path     string `json:"path"`
	Accesses uint64 `json:"accesses"`
	Pages    uint64 `json:"pages"`
}

// Summary is what `predictio trace info` reports about a bundle. Counts come
// from reading every row; Dropped and the host come from the manifest.
type Summary struct {
	Bundle        string            `json:"bundle"`
	FormatVersion string            `json:"format_version"`
	ToolVersion   string            `json:"tool_version,omitempty"`
	Source        string            `json:"source,omitempty"`
	Complete      bool              `json:"complete"`
	Events        uint64            `json:"events"`
	Hints         uint64            `json:"hints"`
	Files         uint64            `json:"files"`
	Pages         uint64            `json:"pages"`
	FirstTSNS     uint64            `json:"first_ts_ns"`
	LastTSNS      uint64            `json:"last_ts_ns"`
	DurationNS    uint64            `json:"duration_ns"`
	Dropped       uint64            `json:"dropped"`
	AccessesBytes uint64            `json:"accesses_bytes"`
	BundleBytes   uint64            `json:"bundle_bytes"`
	BytesPerEvent float64           `json:"bytes_per_event"`
	Kinds         map[string]uint64 `json:"kinds"`
	HintKinds     map[string]uint64 `json:"hint_kinds"`
	HintSources   map[string]uint64 `json:"hint_sources"`
	TopFiles      []FileCount       `json:"top_files"`
	Host          formats.Host      `json:"host"`
	Notes         []string          `json:"notes,omitempty"`

	// Format 1.1: service times, the recorded wall (first start to last
	// completion, from the rows), path-only file rows, adapters and kernel.
	ServiceTimes   bool     `json:"service_times"`
	RecordedWallNS uint64   `json:"recorded_wall_ns"`
	PathOnlyFiles  uint64   `json:"path_only_files"`
	Adapters       []string `json:"adapters,omitempty"`
	Kernel         string   `json:"kernel,omitempty"`
	// MissingFileRows counts accesses and hints whose file_id is not in
	// files.arrow ('predictio trace verify' lists them).
	MissingFileRows uint64 `json:"missing_file_rows"`
	// Format 1.2: the recorder's own cost in the think times, summed over
	// the rows and threads: what its programs measured (tracer_ns), the
	// system calls that paid the tracing slow path (tracer_calls) and that
	// path's measured cost per call (manifest recording.syscall_cost_ns).
	TracerNS      uint64  `json:"tracer_ns"`
	TracerCalls   uint64  `json:"tracer_calls"`
	SyscallCostNS float64 `json:"syscall_cost_ns,omitempty"`
	// Integrity is how the tables were checked while read
	// (formats.Integrity: crc32c, zstd-checksums+sha256, or skipped).
	Integrity formats.Integrity `json:"integrity"`
}

// maxDenseFileID bounds the per-file counter slice; larger ids (and ids
// far beyond the files table, as in a corrupt bundle) use a map.
const maxDenseFileID = 1 << 22

// Info reads the bundle in dir once, streaming, and summarizes it. top is
// the number of files to list by access count (0 lists none). opts are
// passed to formats.Open (formats.NoVerify).
func Info(dir string, top int, opts ...formats.OpenOption) (*Summary, error) {
	b, err := openBundle(dir, opts)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	m := b.Manifest()
	s := &Summary{
		Bundle:        dir,
		FormatVersion: m.FormatVersion,
		ToolVersion:   m.ToolVersion,
		Source:        m.Recording.Source,
		Complete:      m.Complete,
		Dropped:       m.Counters.DroppedEvents,
		Host:          m.Host,
		Notes:         m.Notes,
		Kinds:         map[string]uint64{},
		HintKinds:     map[string]uint64{},
		HintSources:   map[string]uint64{},
		ServiceTimes:  b.HasServiceTimes(),
		Adapters:      m.Recording.Adapters,
		Kernel:        m.Recording.Kernel,
		SyscallCostNS: m.Recording.SyscallCostNS,
		Integrity:     b.Integrity(),
	}
	files, err := b.Files()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	s.Files = uint64(len(files))
	known := make(map[uint32]bool, len(files))
	for i := range files {
		known[files[i].ID] = true
		if files[i].PathOnly() {
			s.PathOnlyFiles++
		}
	}
	denseLimit := uint32(min(max(2*len(files), 1024), maxDenseFileID))

	var (
		kinds         [256]uint64
		dense         []uint64 // accesses per file id
		densePages    []uint64
		sparse        = map[uint32][2]uint64{}
		span          tsSpan
		events, pages uint64
		lastID        uint32
		haveLast      bool
		lastKnown     bool
		wall          formats.WallSpan
	)
	err = forEachAccess(b, func(a *formats.Access) error {
		events++
		pages += uint64(a.NPages)
		kinds[a.Kind]++
		span.see(a.TS)
		wall.Add(a.Kind, a.TS, a.EndNS)
		s.TracerNS += uint64(a.TracerNS)
		s.TracerCalls += uint64(a.TracerCalls)
		if !haveLast || a.FileID != lastID {
			lastID, haveLast, lastKnown = a.FileID, true, known[a.FileID]
		}
		if !lastKnown {
			s.MissingFileRows++
		}
		if a.FileID < denseLimit {
			if int(a.FileID) >= len(dense) {
				n := max(int(a.FileID)+1, 2*len(dense), 1024)
				dense = append(dense, make([]uint64, n-len(dense))...)
				densePages = append(densePages, make([]uint64, n-len(densePages))...)
			}
			dense[a.FileID]++
			densePages[a.FileID] += uint64(a.NPages)
		} else {
			v := sparse[a.FileID]
			v[0]++
			v[1] += uint64(a.NPages)
			sparse[a.FileID] = v
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	var hintKinds [256]uint64
	err = forEachHint(b, func(h *formats.Hint) error {
		s.Hints++
		hintKinds[h.Kind]++
		s.HintSources[orDash(h.Source)]++
		span.see(h.TS)
		if h.FileID != 0 && !known[h.FileID] {
			s.MissingFileRows++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	s.Events, s.Pages = events, pages
	for k, n := range kinds {
		if n > 0 {
			s.Kinds[KindName(formats.AccessKind(k))] = n
		}
	}
	for k, n := range hintKinds {
		if n > 0 {
			s.HintKinds[HintKindName(formats.HintKind(k))] = n
		}
	}
	if span.ok {
		s.FirstTSNS, s.LastTSNS, s.DurationNS = span.first, span.last, span.last-span.first
	}
	s.RecordedWallNS = wall.Wall()
	if !span.ok && m.End.MonotonicNS > m.Start.MonotonicNS {
		s.DurationNS = m.End.MonotonicNS - m.Start.MonotonicNS
	}

	for _, name := range []string{formats.ManifestFile, formats.FilesFile, formats.AccessesFile, formats.HintsFile} {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil {
			s.BundleBytes += uint64(st.Size())
			if name == formats.AccessesFile {
				s.AccessesBytes = uint64(st.Size())
			}
		}
	}
	if events > 0 {
		s.BytesPerEvent = float64(s.AccessesBytes) / float64(events)
	}

	paths := make(map[uint32]string, len(files))
	for _, f := range files {
		paths[f.ID] = f.Path
	}
	var counts []FileCount
	for id, n := range dense {
		if n > 0 {
			counts = append(counts, FileCount{FileID: uint32(id), Accesses: n, Pages: densePages[id]})
		}
	}
	for id, v := range sparse {
		counts = append(counts, FileCount{FileID: id, Accesses: v[0], Pages: v[1]})
	}
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].Accesses != counts[j].Accesses {
			return counts[i].Accesses > counts[j].Accesses
		}
		return counts[i].FileID < counts[j].FileID
	})
	if len(counts) > top {
		counts = counts[:max(top, 0)]
	}
	for i := range counts {
		counts[i].Path = paths[counts[i].FileID]
	}
	s.TopFiles = counts
	if s.TopFiles == nil {
		s.TopFiles = []FileCount{}
	}
	return s, nil
}

// WriteText prints s for people.
func (s *Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "bundle\t%s\n", s.Bundle)
	fmt.Fprintf(tw, "format\t%s (tool %s, source %s, complete %v)\n", s.FormatVersion, orDash(s.ToolVersion), orDash(s.Source), s.Complete)
	fmt.Fprintf(tw, "host\t%s, kernel %s, %d CPUs, page size %d\n", orDash(s.Host.Hostname), orDash(s.Host.KernelRelease), s.Host.CPUs, s.Host.PageSize)
	fmt.Fprintf(tw, "events\t%d (%d pages)\n", s.Events, s.Pages)
	fmt.Fprintf(tw, "dropped\t%d\n", s.Dropped)
	fmt.Fprintf(tw, "hints\t%d\n", s.Hints)
	fmt.Fprintf(tw, "files\t%d\n", s.Files)
	fmt.Fprintf(tw, "time span\t%s (ts %d .. %d ns)\n", time.Duration(s.DurationNS), s.FirstTSNS, s.LastTSNS)
	st := "no: ts_ns only (the bundle predates format 1.1 or its recorder had none)"
	if s.ServiceTimes {
		st = "yes: ts_ns is each operation's start, end_ns its completion"
	}
	fmt.Fprintf(tw, "service times\t%s\n", st)
	fmt.Fprintf(tw, "recorded wall\t%s (first access start to last completion)\n", time.Duration(s.RecordedWallNS))
	if s.Kernel != "" || len(s.Adapters) > 0 {
		fmt.Fprintf(tw, "recording\tkernel %s, adapters %s\n", orDash(s.Kernel), orDash(strings.Join(s.Adapters, ", ")))
	}
	if s.TracerNS > 0 || s.TracerCalls > 0 {
		fmt.Fprintf(tw, "recorder's cost\t%s in the think times: its programs %s, %d system calls × %.0f ns (summed over threads; replay --untraced takes it out)\n",
			time.Duration(float64(s.TracerNS)+float64(s.TracerCalls)*s.SyscallCostNS), time.Duration(s.TracerNS), s.TracerCalls, s.SyscallCostNS)
	}
	if s.PathOnlyFiles > 0 {
		fmt.Fprintf(tw, "path-only files\t%d (paths looked up that did not exist)\n", s.PathOnlyFiles)
	}
	if s.MissingFileRows > 0 {
		fmt.Fprintf(tw, "missing files\t%d rows reference file ids not in files.arrow: run 'predictio trace verify %s'\n", s.MissingFileRows, s.Bundle)
	}
	fmt.Fprintf(tw, "integrity\t%s\n", s.Integrity.Describe())
	fmt.Fprintf(tw, "on disk\t%d bytes (accesses.arrow %d bytes, %.2f bytes/event)\n", s.BundleBytes, s.AccessesBytes, s.BytesPerEvent)
	for _, k := range sortedKeys(s.Kinds) {
		fmt.Fprintf(tw, "kind %s\t%d\n", k, s.Kinds[k])
	}
	for _, k := range sortedKeys(s.HintKinds) {
		fmt.Fprintf(tw, "hint %s\t%d\n", k, s.HintKinds[k])
	}
	for _, k := range sortedKeys(s.HintSources) {
		fmt.Fprintf(tw, "hint source %s\t%d\n", k, s.HintSources[k])
	}
	for _, n := range s.Notes {
		fmt.Fprintf(tw, "note\t%s\n", n)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.TopFiles) > 0 {
		fmt.Fprintln(w, "\ntop files by accesses:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "file_id\taccesses\tpages\t\tpath")
		for _, f := range s.TopFiles {
			fmt.Fprintf(tw, "%d\t%d\t%d\t\t%s\n", f.FileID, f.Accesses, f.Pages, orDash(f.Path))
		}
		return tw.Flush()
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedKeys(m map[string]uint64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// tsSpan is the first and last of the timestamps it has seen, if any (ok).
type tsSpan struct {
	first, last uint64
	ok          bool
}

func (s *tsSpan) see(ts uint64) {
	if !s.ok || ts < s.first {
		s.first = ts
	}
	if !s.ok || ts > s.last {
		s.last = ts
	}
	s.ok = true
}
