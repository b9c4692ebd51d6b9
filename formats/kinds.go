package formats

import "fmt"

var accessKindNames = map[AccessKind]string{
	KindRead:           "read",
	KindFault:          "fault",
	KindMap:            "map",
	KindCacheAdd:       "cache_add",
	KindReadaheadSync:  "readahead_sync",
	KindReadaheadAsync: "readahead_async",
	KindCacheDelete:    "cache_delete",
	KindImported:       "imported",
}

var hintKindNames = map[HintKind]string{
	HintTreeChildEnter: "tree_child_enter",
	HintTensorLayout:   "tensor_layout",
	HintLayerStart:     "layer_start",
	HintCustom:         "custom",
}

// String returns the documented name of k ("read", "fault", ...), or
// "kindN" for an undefined value.
func (k AccessKind) String() string {
	if n, ok := accessKindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind%d", uint8(k))
}

// Valid reports whether k is a defined access kind.
func (k AccessKind) Valid() bool { _, ok := accessKindNames[k]; return ok }

// ParseAccessKind returns the access kind named s.
func ParseAccessKind(s string) (AccessKind, error) {
	for k, n := range accessKindNames {
		if n == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("parse access kind %q: unknown (want read, fault, map, cache_add, readahead_sync, readahead_async, cache_delete or imported)", s)
}

// String returns the documented name of k ("tree_child_enter", ...), or
// "hintN" for an undefined value.
func (k HintKind) String() string {
	if n, ok := hintKindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("hint%d", uint8(k))
}

// Valid reports whether k is a defined hint kind.
func (k HintKind) Valid() bool { _, ok := hintKindNames[k]; return ok }

// ParseHintKind returns the hint kind named s.
func ParseHintKind(s string) (HintKind, error) {
	for k, n := range hintKindNames {
		if n == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("parse hint kind %q: unknown (want tree_child_enter, tensor_layout, layer_start or custom)", s)
}
