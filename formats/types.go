// Package formats reads and writes predictio trace bundles.
//
// A bundle is a directory holding manifest.json and three Arrow IPC files
// (files.arrow, accesses.arrow, hints.arrow) with zstd body compression.
// docs/format.md is the normative specification.
package formats

// FormatVersion is the semantic version of the bundle format written by this
// package. Readers reject bundles whose major version differs.
const FormatVersion = "1.2.0"

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

	// Metadata and mapping kinds (format 1.1). Metadata kinds (open, stat,
	// readdir, exec) cover no pages: their npages is 0.
	KindOpen    AccessKind = 9  // open/openat/openat2: file_id = the opened file, ret = fd or -errno
	KindStat    AccessKind = 10 // stat family, access/faccessat*: file_id as for open, ret = result
	KindReaddir AccessKind = 11 // getdents64 of a directory: file_id = the directory, ret = bytes
	KindExec    AccessKind = 12 // sched_process_exec / execve: file_id = the executable
	KindMmap    AccessKind = 13 // mmap of a file: first_page/npages = the mapped range, ret = address
)

// MaxAccessKind is the highest access kind this version defines.
const MaxAccessKind = KindMmap

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

// MaxHintKind is the highest hint kind this version defines.
const MaxHintKind = HintCustom

// Mapping protection bits of Access.Prot (the prot column).
const (
	ProtRead   uint8 = 1 << 0 // PROT_READ
	ProtWrite  uint8 = 1 << 1 // PROT_WRITE
	ProtExec   uint8 = 1 << 2 // PROT_EXEC
	ProtShared uint8 = 1 << 3 // MAP_SHARED
)

// Hint sources (the hints source column).
const (
	HintSourceApp     = "app"      // sent by the program through the hint socket
	HintSourceAdapter = "adapter:" // prefix of hints derived by a file-structure adapter, e.g. "adapter:sqlite"
)

// File is one row of files.arrow.
//
// A row with Ino 0 and Mode 0 is a path-only row (format 1.1): a path a
// program looked up that did not exist (a failed open or stat), kept so that
// metadata replay can repeat the lookup. PathOnly reports it.
type File struct {
	ID      uint32 // file_id, referenced by accesses and hints
	Dev     uint64 // device in the kernel's s_dev encoding (major<<20 | minor)
	Ino     uint64
	Path    string // empty when unresolved
	Size    uint64 // size_bytes
	MtimeNS int64  // mtime_ns
	Mode    uint32 // st_mode (type and permission bits); 0 = unknown (and in 1.0 bundles)
}

// File type bits of File.Mode (S_IFMT), for writers that know a file's type
// but not its inode: a row with Ino 0 needs them, or it is path-only.
const (
	ModeType    uint32 = 0o170000 // S_IFMT
	ModeRegular uint32 = 0o100000 // S_IFREG
	ModeDir     uint32 = 0o040000 // S_IFDIR
	ModeBlock   uint32 = 0o060000 // S_IFBLK
)

// PathOnly reports whether f is a path-only row: Ino and Mode are 0. Only
// bundles of format 1.1 or later have path-only rows; in older ones every
// Mode reads as 0.
func (f *File) PathOnly() bool { return f.Ino == 0 && f.Mode == 0 }

// Block reports whether f is a block device: in a recording, the device's
// cached blocks, a filesystem's metadata (docs/format.md).
func (f *File) Block() bool { return f.Mode&ModeType == ModeBlock }

// Access is one row of accesses.arrow. The fields after Kind are columns of
// format 1.1; they read as 0 from 1.0 bundles.
type Access struct {
	TS        uint64 // ts_ns, CLOCK_MONOTONIC (bpf_ktime_get_ns); the operation's start when EndNS != 0
	PID       uint32
	TID       uint32
	Comm      string // dictionary-encoded on disk
	FileID    uint32
	FirstPage uint64
	NPages    uint32
	Kind      AccessKind

	EndNS        uint64 // end_ns: completion of the operation behind the row; 0 = unknown
	Op           uint64 // op: rows of one syscall or fault share it; 0 = none
	Ret          int64  // ret: syscall result (bytes, fd, address) or -errno; 0 where not a syscall
	Prot         uint8  // prot: fault/map/mmap rows: Prot* bits of the mapping; 0 = unknown
	MapFirstPage uint64 // map_first_page: fault/map/mmap rows: first file page of the mapping (vm_pgoff)
	MapPages     uint64 // map_pages: fault/map/mmap rows: the mapping's length in pages; 0 = unknown

	// TracerNS (tracer_ns, format 1.2) is, on a system call row, the
	// recorder's own time in the thread's think time before the call: the
	// previous traced call's exit tail and this call's entry head, as the
	// BPF programs measured them. 0 = unknown or none.
	TracerNS uint32
	// TracerCalls (tracer_calls, format 1.2) is, on a system call row, the
	// thread's system calls in that think time, this one included: each
	// paid the kernel's syscall tracing slow path, which the programs
	// cannot time (Manifest.Recording.SyscallCostNS). 0 = unknown.
	TracerCalls uint32
}

// Hint is one row of hints.arrow. TID and Source are columns of format 1.1;
// they read as 0 and "" from 1.0 bundles.
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
	TID         uint32 // sending thread; 0 = unknown
	Source      string // HintSourceApp, or HintSourceAdapter + adapter name; dictionary-encoded on disk
}
