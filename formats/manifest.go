package formats

import "time"

// Manifest is the content of manifest.json.
type Manifest struct {
	FormatVersion string       `json:"format_version"`
	ToolVersion   string       `json:"tool_version"`
	Host          Host         `json:"host"`
	Filesystems   []Filesystem `json:"filesystems,omitempty"`
	Recording     Recording    `json:"recording"`
	Start         Timestamp    `json:"start"`
	End           Timestamp    `json:"end"`
	Counters      Counters     `json:"counters"`
	Timing        Timing       `json:"timing"`
	// Tables maps a table file name to its SHA-256 and row count.
	Tables map[string]TableInfo `json:"tables"`
	// Complete is false for a bundle recovered by repair.
	Complete bool `json:"complete"`
	// Notes holds free-form remarks, e.g. what repair recovered or what an
	// importer could not provide.
	Notes []string `json:"notes,omitempty"`
}

// Host describes the machine a bundle was recorded on.
type Host struct {
	Hostname      string `json:"hostname,omitempty"`
	KernelRelease string `json:"kernel_release"`
	CPUs          int    `json:"cpus"`
	MemoryBytes   uint64 `json:"memory_bytes"`
	PageSize      int    `json:"page_size"`
}

// Filesystem describes one block device whose files appear in the bundle.
type Filesystem struct {
	Dev              uint64 `json:"dev"` // s_dev encoding
	Device           string `json:"device,omitempty"`
	MountPoint       string `json:"mount_point,omitempty"`
	FSType           string `json:"fs_type,omitempty"`
	Rotational       bool   `json:"rotational"`
	LogicalBlockSize int    `json:"logical_block_size"`
}

// Recording holds the parameters a bundle was recorded with.
type Recording struct {
	Source       string   `json:"source"` // "record", "synth", "import:fio", ...
	CommandLine  []string `json:"command_line,omitempty"`
	Target       string   `json:"target,omitempty"` // command, pids, cgroup, all
	Include      []string `json:"include,omitempty"`
	Exclude      []string `json:"exclude,omitempty"`
	Comm         []string `json:"comm,omitempty"`
	MinSizeBytes uint64   `json:"min_size_bytes,omitempty"`
	EventSources []string `json:"event_sources,omitempty"` // attached tracepoints/probes
	HintSocket   string   `json:"hint_socket,omitempty"`
	// Adapters lists the file-structure adapters that ran at record time
	// (format 1.1), e.g. ["sqlite"].
	Adapters []string `json:"adapters,omitempty"`
	// Kernel is the kernel release the event semantics come from (format
	// 1.1): which tracepoints fired where. Close sets it to
	// Host.KernelRelease when the writer's caller left it empty.
	Kernel string `json:"kernel,omitempty"`
	// SyscallCostNS is what tracing added to each system call of a traced
	// thread beyond the time the recorder's programs measured themselves
	// (format 1.2): the kernel's syscall tracing slow path and the
	// programs' dispatch (source.SyscallCost: measured once per boot). A
	// row's tracer_calls times it, plus its tracer_ns, is the recorder's
	// cost in the think time before the row. 0 = not measured.
	SyscallCostNS float64 `json:"syscall_cost_ns,omitempty"`
}

// Timing describes the time base of the access rows (format 1.1; zero in 1.0
// manifests).
type Timing struct {
	// ServiceTimes is true when access rows carry end_ns: ts_ns is then the
	// start of the operation, end_ns its completion. The recorder sets it.
	ServiceTimes bool `json:"service_times"`
	// FirstStartNS is the smallest ts_ns of the rows the program issued
	// (AccessKind.Issued); LastEndNS their largest completion (end_ns, or
	// ts_ns for rows whose end_ns is 0). The writer sets both from the
	// rows it wrote (WallSpan).
	FirstStartNS uint64 `json:"first_start_ns"`
	LastEndNS    uint64 `json:"last_end_ns"`
	// RecordedWallNS is LastEndNS - FirstStartNS: the recorded wall time
	// that replay's timing error compares against. The writer sets it.
	RecordedWallNS uint64 `json:"recorded_wall_ns"`
}

// WallSpan gathers the recorded wall of access rows: from the earliest
// start of a row the program issued (AccessKind.Issued) to the latest
// completion of one. The writer, Repair and trace info measure it alike.
type WallSpan struct {
	first, lastEnd uint64
	ok             bool
}

// Add counts a row of kind k that started at ts and completed at end (0:
// unknown, taken as ts).
func (s *WallSpan) Add(k AccessKind, ts, end uint64) {
	if !k.Issued() {
		return
	}
	end = max(end, ts)
	if !s.ok {
		s.first, s.lastEnd, s.ok = ts, end, true
	}
	s.first, s.lastEnd = min(s.first, ts), max(s.lastEnd, end)
}

// Wall returns the span, 0 when no row counted.
func (s *WallSpan) Wall() uint64 { return s.lastEnd - s.first }

// SetTiming sets t's first start, last end and recorded wall from the
// span (zeros when no row counted).
func (s *WallSpan) SetTiming(t *Timing) {
	t.FirstStartNS, t.LastEndNS, t.RecordedWallNS = s.first, s.lastEnd, s.Wall()
}

// Timestamp is a point in time on both clocks.
type Timestamp struct {
	Wall        time.Time `json:"wall"`
	MonotonicNS uint64    `json:"monotonic_ns"`
}

// Counters are the totals of a recording.
type Counters struct {
	Events        uint64 `json:"events"`
	DroppedEvents uint64 `json:"dropped_events"`
	Hints         uint64 `json:"hints"`
	RejectedHints uint64 `json:"rejected_hints,omitempty"`
	// DroppedHints is what the senders reported dropping without sending
	// (the recorder's queue was full, or no recorder listened): their
	// drop_report datagrams, docs/hints.md.
	DroppedHints uint64 `json:"dropped_hints,omitempty"`
	Files        uint64 `json:"files"`
}

// TableInfo identifies one table file.
type TableInfo struct {
	SHA256 string `json:"sha256"`
	Rows   uint64 `json:"rows"`
	Bytes  uint64 `json:"bytes"`
}
