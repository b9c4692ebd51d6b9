package formats

import (
	"fmt"
	"slices"
	"strings"
)

// accessKindNames holds the documented name of each access kind, indexed by
// value; "" marks an undefined value.
var accessKindNames = [...]string{
	KindRead:           "read",
	KindFault:          "fault",
	KindMap:            "map",
	KindCacheAdd:       "cache_add",
	KindReadaheadSync:  "readahead_sync",
	KindReadaheadAsync: "readahead_async",
	KindCacheDelete:    "cache_delete",
	KindImported:       "imported",
	KindOpen:           "open",
	KindStat:           "stat",
	KindReaddir:        "readdir",
	KindExec:           "exec",
	KindMmap:           "mmap",
}

// hintKindNames holds the documented name of each hint kind, by value.
var hintKindNames = [...]string{
	HintTreeChildEnter: "tree_child_enter",
	HintTensorLayout:   "tensor_layout",
	HintLayerStart:     "layer_start",
	HintCustom:         "custom",
}

// UndefinedKindName is the kind_name of a row whose kind this version does
// not define (and of kind 0).
const UndefinedKindName = "undefined"

// kindNameDict returns the values of a kind_name dictionary: entry i is the
// name of kind i, and UndefinedKindName for 0 and undefined values. Rows of a
// kind beyond the table use index 0.
func kindNameDict(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		if n == "" {
			n = UndefinedKindName
		}
		out[i] = n
	}
	return out
}

var (
	accessKindDict = kindNameDict(accessKindNames[:])
	hintKindDict   = kindNameDict(hintKindNames[:])
)

// AccessKindDictionary returns the values of the accesses kind_name
// dictionary: entry i names kind i, UndefinedKindName marks 0 and undefined
// values. A row's kind_name index is its kind when the kind is defined, 0
// otherwise.
func AccessKindDictionary() []string { return slices.Clone(accessKindDict) }

// HintKindDictionary returns the values of the hints kind_name dictionary,
// as AccessKindDictionary does for accesses.
func HintKindDictionary() []string { return slices.Clone(hintKindDict) }

// String returns the documented name of k ("read", "fault", ...), or
// "kindN" for an undefined value.
func (k AccessKind) String() string {
	if k.Valid() {
		return accessKindNames[k]
	}
	return fmt.Sprintf("kind%d", uint8(k))
}

// Valid reports whether k is a defined access kind.
func (k AccessKind) Valid() bool { return int(k) < len(accessKindNames) && accessKindNames[k] != "" }

// Metadata reports whether k is a metadata kind (open, stat, readdir,
// exec), whose rows cover no pages (npages 0).
func (k AccessKind) Metadata() bool { return k >= KindOpen && k <= KindExec }

// Pages reports whether k is a page kind (read through imported, and mmap),
// whose rows cover at least one page.
func (k AccessKind) Pages() bool { return k.Valid() && !k.Metadata() }

// Demand reports whether rows of kind k are the program's demand for
// pages (read, fault, map and imported): what simulate, train and the
// oracle count and replay re-issues.
func (k AccessKind) Demand() bool {
	return k == KindRead || k == KindFault || k == KindMap || k == KindImported
}

// Issued reports whether rows of kind k are operations the program issued
// that replay re-issues: its demand and its open, stat, readdir and mmap
// calls. Exec rows and the kernel's rows (cache add and delete, readahead
// decisions) are not. The recorded wall spans these rows only.
func (k AccessKind) Issued() bool {
	return k.Demand() || k == KindOpen || k == KindStat || k == KindReaddir || k == KindMmap
}

// Mapping reports whether rows of kind k describe a mapping in the prot,
// map_first_page and map_pages columns (fault, map and mmap).
func (k AccessKind) Mapping() bool { return k == KindFault || k == KindMap || k == KindMmap }

// ParseAccessKind returns the access kind named s.
func ParseAccessKind(s string) (AccessKind, error) {
	for k, n := range accessKindNames {
		if n != "" && n == s {
			return AccessKind(k), nil
		}
	}
	return 0, fmt.Errorf("parse access kind %q: unknown (want %s)", s, nameList(accessKindNames[:]))
}

// String returns the documented name of k ("tree_child_enter", ...), or
// "hintN" for an undefined value.
func (k HintKind) String() string {
	if k.Valid() {
		return hintKindNames[k]
	}
	return fmt.Sprintf("hint%d", uint8(k))
}

// Valid reports whether k is a defined hint kind.
func (k HintKind) Valid() bool { return int(k) < len(hintKindNames) && hintKindNames[k] != "" }

// ParseHintKind returns the hint kind named s.
func ParseHintKind(s string) (HintKind, error) {
	for k, n := range hintKindNames {
		if n != "" && n == s {
			return HintKind(k), nil
		}
	}
	return 0, fmt.Errorf("parse hint kind %q: unknown (want %s)", s, nameList(hintKindNames[:]))
}

// nameList joins the defined names as "a, b or c".
func nameList(names []string) string {
	var ns []string
	for _, n := range names {
		if n != "" {
			ns = append(ns, n)
		}
	}
	if len(ns) < 2 {
		return strings.Join(ns, "")
	}
	return strings.Join(ns[:len(ns)-1], ", ") + " or " + ns[len(ns)-1]
}
