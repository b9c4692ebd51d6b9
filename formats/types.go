// Package formats reads and writes predictio trace bundles.
//
// A bundle is a directory holding manifest.json and three Arrow IPC files
// (files.arrow, accesses.arrow, hints.arrow) with zstd body compression.
// docs/format.md is the normative specification.
package formats

// FormatVersion is the semantic version of the bundle format written by this
// package. Readers reject bundles whose major version differs.
const FormatVersion = "1.0.0"

// Table file names inside a bundle directory.
const (
	ManifestFile = "manifest.json"
	FilesFile    = "files.arrow"
	AccessesFile = "accesses.arrow"
	HintsFile    = "hints.arrow"
)

// AccessKind says which kernel path observed an access.
type AccessKind uint8

// Access kinds. The numeric values are part of the on-disk format.
const (
	KindRead           AccessKind = 1 // read/pread page-cache lookup (filemap:mm_filemap_get_pages)
	KindFault          AccessKind = 2 // mmap page fault (filemap:mm_filemap_fault)
	KindMap            AccessKind = 3 // fault-around mapping (filemap:mm_filemap_map_pages)
	KindCacheAdd       AccessKind = 4 // page inserted into the page cache, i.e. read from storage
	KindReadaheadSync  AccessKind = 5 // kernel synchronous readahead decision (readahead:page_cache_sync_ra)
	KindReadaheadAsync AccessKind = 6 // kernel asynchronous readahead decision (readahead:page_cache_async_ra)
	KindCacheDelete    AccessKind = 7 // page removed from the page cache
	KindImported       AccessKind = 8 // a block-level or offset-level access from an imported trace
)

// HintKind is the type of an application hint.
type HintKind uint8

// Hint kinds. The numeric values are part of the on-disk format and of the
// hint wire format (docs/hints.md).
const (
	HintTreeChildEnter HintKind = 1
	HintTensorLayout   HintKind = 2
	HintLayerStart     HintKind = 3
	HintCustom         HintKind = 4
)

// File is one row of files.arrow.
type File struct {
	ID      uint32 // file_id, referenced by accesses and hints
	Dev     uint64 // device in the kernel's s_dev encoding (major<<20 | minor)
	Ino     uint64
	Path    string // empty when unresolved
	Size    uint64 // size_bytes
	MtimeNS int64  // mtime_ns
}

// Access is one row of accesses.arrow.
type Access struct {
	TS        uint64 // ts_ns, CLOCK_MONOTONIC (bpf_ktime_get_ns)
	PID       uint32
	TID       uint32
	Comm      string // dictionary-encoded on disk
	FileID    uint32
	FirstPage uint64
	NPages    uint32
	Kind      AccessKind
}

// Hint is one row of hints.arrow.
type Hint struct {
	TS          uint64 // ts_ns, CLOCK_MONOTONIC
	PID         uint32
	Kind        HintKind
	FileID      uint32
	ParentPage  uint64
	Position    uint32
	Children    []uint64 // child pages, for tree_child_enter
	Name        string   // tensor name, or custom payload label
	OffsetBytes uint64
	LengthBytes uint64
}
