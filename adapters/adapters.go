// Package adapters turns page accesses of recognized files into the typed
// events the policies take, by reading the files' own on-disk structure:
// SQLite and LMDB B-trees become TreeChildEnter events and GGUF model
// files become TensorLayout events, so the tree and tensor policies work on
// unmodified programs. A Stage runs the adapters between an event source and
// a policies.Dispatcher; record, simulate, replay, run and daemon all use it.
//
// docs/adapters.md describes each adapter, its rules and its limits.
package adapters

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/predictio/predictio/formats"
)

// Adapter names, as accepted by ParseList and reported in Stats and
// FileStatus.
const (
	SQLite = "sqlite"
	LMDB   = "lmdb"
	GGUF   = "gguf"
)

// names lists the adapters in recognition order.
var names = []string{SQLite, LMDB, GGUF}

// Names returns the adapter names in the order the Stage tries them.
func Names() []string { return slices.Clone(names) }

// ErrUnknownAdapter is wrapped by ParseList for a name that is not an
// adapter.
var ErrUnknownAdapter = errors.New("unknown adapter")

// ParseList parses the value of --adapters: "none" (no adapters), "all" or
// "" (every adapter, the default), or a comma-separated list of names such
// as "sqlite,gguf". The result is in recognition order without duplicates;
// "none" gives an empty, non-nil slice.
func ParseList(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "all":
		return Names(), nil
	case "none":
		return []string{}, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(names, n) {
			return nil, fmt.Errorf("parse adapters %q: %w %q; valid: none, all, %s", s, ErrUnknownAdapter, n, strings.Join(names, ", "))
		}
		want[n] = true
	}
	var out []string
	for _, n := range names {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// Source returns the hints.arrow source label of events derived by the
// adapter name: "adapter:sqlite", "adapter:lmdb" or "adapter:gguf"
// (formats.HintSourceAdapter and the name).
func Source(name string) string { return formats.HintSourceAdapter + name }

// Defaults of Config fields left zero.
const (
	DefaultPageSize    = 4096
	DefaultMaxFiles    = 256
	DefaultAhead       = 16
	DefaultConfirm     = 2
	DefaultTensorAhead = 256 << 20
	// MaxHintChildren bounds the child pages of one derived
	// TreeChildEnter, as the hint wire format does (docs/hints.md).
	MaxHintChildren = 1024
)

// Config configures a Stage. Every field is optional.
type Config struct {
	// Adapters are the adapters to run (ParseList); nil means all.
	Adapters []string
	// PageSize is the page size of FileAccess pages and of the derived
	// events' pages; 0 means DefaultPageSize. It must be a power of two.
	PageSize int
	// MaxFiles bounds the recognized files whose state is kept at once;
	// the least recently accessed one is dropped beyond it. 0 means
	// DefaultMaxFiles.
	MaxFiles int
	// Ahead is the most upcoming children of a B-tree node one
	// TreeChildEnter lists (sqlite, lmdb); 0 means DefaultAhead.
	Ahead int
	// Confirm is how many adjacent steps in one direction through a node's
	// children make a scan (sqlite, lmdb). Children are emitted only in a
	// scan, so point lookups emit nothing. 0 means DefaultConfirm; a
	// negative value emits on every child entered, scan or not.
	Confirm int
	// TensorAhead is how many bytes of tensors, in load order, a GGUF
	// adapter announces beyond the tensor being read; 0 means
	// DefaultTensorAhead. At least the next tensor is always announced.
	TensorAhead uint64
	// TensorOrder is the order GGUF tensors are announced in:
	// OrderLlamaCPP (the default) or OrderFile.
	TensorOrder string
	// TensorRepack says which tensors llama.cpp's CPU backend repacks
	// (its CPU_REPACK buffer type), which changes the order it reads them
	// in without mmap: RepackAuto (the default: as on this machine's CPU),
	// RepackNone, RepackAVX2 or RepackAVX512.
	TensorRepack string
	// ReadCached lets the SQLite and LMDB adapters read a B-tree page that
	// the program has not read yet, but that they predicted and that is
	// now in the page cache (Files' Content must be a CachedContent;
	// cachestat needs Linux 6.5): a scan's walk ahead parses it, and an
	// index scan's lookups below a SQLite table interior page are then
	// predicted before the program's descent reads it. It reads nothing
	// that is not cached, but what it derives then depends on the page
	// cache: live runtimes that prefetch set it; a recording, whose hints
	// must not depend on the cache's state, should not.
	ReadCached bool
	// HeaderFirst recognizes a file only at an access that covers its
	// first page, so that recognition reads only a page the program has
	// just read itself; accesses to a file before that pass unexamined,
	// and the file is tried again at its next access of page 0. SQLite,
	// LMDB and GGUF readers all read their header first. The live
	// runtimes set it: with it, an adapter that is on costs a program no
	// read of its own. With ReadCached too, a file whose first access seen
	// is not to page 0 (tracing started after the program read its
	// header) is recognized then if its header is in the page cache, and
	// skipped from then on if it is not.
	HeaderFirst bool
	// Warn receives one message per notable condition of a file (WAL mode,
	// unsupported versions, malformed structure). nil drops them.
	Warn func(msg string)
}

// GGUF tensor orders of Config.TensorOrder.
const (
	// OrderLlamaCPP announces tensors in the order llama.cpp creates and,
	// without mmap, reads them (docs/adapters.md).
	OrderLlamaCPP = "llama.cpp"
	// OrderFile announces tensors in file offset order.
	OrderFile = "file"
)

// CPU repack models of Config.TensorRepack.
const (
	RepackAuto   = "auto"
	RepackNone   = "none"
	RepackAVX2   = "avx2"
	RepackAVX512 = "avx512"
)

func (c *Config) fill() error {
	if c.Adapters == nil {
		c.Adapters = Names()
	}
	for _, n := range c.Adapters {
		if !slices.Contains(names, n) {
			return fmt.Errorf("configure adapters: %w %q; valid: %s", ErrUnknownAdapter, n, strings.Join(names, ", "))
		}
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.PageSize < 512 || c.PageSize&(c.PageSize-1) != 0 {
		return fmt.Errorf("configure adapters: page size %d is not a power of two of at least 512", c.PageSize)
	}
	if c.MaxFiles <= 0 {
		c.MaxFiles = DefaultMaxFiles
	}
	if c.Ahead <= 0 {
		c.Ahead = DefaultAhead
	}
	c.Ahead = min(c.Ahead, MaxHintChildren)
	if c.Confirm == 0 {
		c.Confirm = DefaultConfirm
	}
	if c.Confirm < 0 {
		c.Confirm = 0
	}
	if c.TensorAhead == 0 {
		c.TensorAhead = DefaultTensorAhead
	}
	switch c.TensorOrder {
	case "":
		c.TensorOrder = OrderLlamaCPP
	case OrderLlamaCPP, OrderFile:
	default:
		return fmt.Errorf("configure adapters: tensor order %q; valid: %s, %s", c.TensorOrder, OrderLlamaCPP, OrderFile)
	}
	switch c.TensorRepack {
	case "", RepackAuto:
		c.TensorRepack = hostRepack()
	case RepackNone, RepackAVX2, RepackAVX512:
	default:
		return fmt.Errorf("configure adapters: tensor repack %q; valid: %s, %s, %s, %s", c.TensorRepack, RepackAuto, RepackNone, RepackAVX2, RepackAVX512)
	}
	return nil
}
