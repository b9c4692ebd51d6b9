package policies

import "github.com/predictio/predictio/formats"

// FromAccess sets ev to the event of an accesses.arrow row: the
// ProcessExec event of an exec row, the FileAccess event of any other.
func (ev *Event) FromAccess(a *formats.Access) {
	if a.Kind == formats.KindExec {
		*ev = Event{Kind: EventProcessExec, TS: a.TS, PID: a.PID, TID: a.TID, File: a.FileID}
		return
	}
	*ev = Event{Kind: EventFileAccess, TS: a.TS, PID: a.PID, TID: a.TID, File: a.FileID, Access: AccessOf(a)}
}

// AccessOf returns the FileAccess payload of an accesses.arrow row.
func AccessOf(a *formats.Access) FileAccess {
	return FileAccess{Kind: a.Kind, Page: a.FirstPage, NPages: a.NPages, End: a.EndNS,
		Prot: a.Prot, MapFirst: a.MapFirstPage, MapPages: a.MapPages, Op: a.Op}
}

// FromHint sets ev to the event of a hints.arrow row and reports whether
// the hint kind has one (custom hints have none). Slices are shared with
// h, not copied.
func (ev *Event) FromHint(h *formats.Hint) bool {
	*ev = Event{TS: h.TS, PID: h.PID, File: h.FileID}
	switch h.Kind {
	case formats.HintTreeChildEnter:
		ev.Kind = EventTreeChildEnter
		ev.Tree = TreeChildEnter{ParentPage: h.ParentPage, Position: h.Position, Children: h.Children}
	case formats.HintTensorLayout:
		ev.Kind = EventTensorLayout
		ev.Tensor = TensorLayout{Name: h.Name, Offset: h.OffsetBytes, Length: h.LengthBytes}
	case formats.HintLayerStart:
		ev.Kind = EventLayerStart
		ev.Layer = LayerStart{Index: h.Position}
	default:
		return false
	}
	return true
}

// KeyOf returns the identity of a files.arrow row, for model lookups.
func KeyOf(f *formats.File) FileKey {
	return FileKey{Path: f.Path, Size: f.Size, MtimeNS: f.MtimeNS}
}

// PagesOf returns the number of pageSize-byte pages of a size-byte file
// (ceil(size/pageSize)); pageSize 0 means DefaultPageSize.
func PagesOf(size uint64, pageSize int) uint64 {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	return (size + uint64(pageSize) - 1) / uint64(pageSize)
}
