package trace

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/predictio/predictio/formats"
)

// CatOptions selects what Cat prints.
type CatOptions struct {
	Table  string // "accesses" (default), "hints" or "files"
	Format string // "csv" (default) or "jsonl"
	Limit  int    // rows to print; 0 or less prints all
}

// errLimit stops the row stream once Limit rows are printed.
var errLimit = errors.New("limit reached")

type accessRow struct {
	TS           uint64 `json:"ts_ns"`
	PID          uint32 `json:"pid"`
	TID          uint32 `json:"tid"`
	Comm         string `json:"comm"`
	FileID       uint32 `json:"file_id"`
	FirstPage    uint64 `json:"first_page"`
	NPages       uint32 `json:"npages"`
	Kind         string `json:"kind"`
	EndNS        uint64 `json:"end_ns"`
	Op           uint64 `json:"op"`
	Ret          int64  `json:"ret"`
	Prot         uint8  `json:"prot"`
	MapFirstPage uint64 `json:"map_first_page"`
	MapPages     uint64 `json:"map_pages"`
	TracerNS     uint32 `json:"tracer_ns"`
	TracerCalls  uint32 `json:"tracer_calls"`
}

type hintRow struct {
	TS          uint64   `json:"ts_ns"`
	PID         uint32   `json:"pid"`
	Kind        string   `json:"kind"`
	FileID      uint32   `json:"file_id"`
	ParentPage  uint64   `json:"parent_page"`
	Position    uint32   `json:"position"`
	Children    []uint64 `json:"children"`
	Name        string   `json:"name"`
	OffsetBytes uint64   `json:"offset_bytes"`
	LengthBytes uint64   `json:"length_bytes"`
	TID         uint32   `json:"tid"`
	Source      string   `json:"source"`
}

type fileRow struct {
	ID      uint32 `json:"file_id"`
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Path    string `json:"path"`
	Size    uint64 `json:"size_bytes"`
	MtimeNS int64  `json:"mtime_ns"`
	Mode    uint32 `json:"mode"`
}

var catHeaders = map[string][]string{
	"accesses": {"ts_ns", "pid", "tid", "comm", "file_id", "first_page", "npages", "kind", "end_ns", "op", "ret", "prot", "map_first_page", "map_pages", "tracer_ns", "tracer_calls"},
	"hints":    {"ts_ns", "pid", "kind", "file_id", "parent_page", "position", "children", "name", "offset_bytes", "length_bytes", "tid", "source"},
	"files":    {"file_id", "dev", "ino", "path", "size_bytes", "mtime_ns", "mode"},
}

// Cat prints the rows of one table of the bundle in dir to w. Kinds are
// printed by name; in CSV, hint children are space-separated page numbers.
// Every column of format 1.1 is printed; a 1.0 bundle's read as 0 (source
// as ""). opts are passed to formats.Open (formats.NoVerify).
func Cat(w io.Writer, dir string, o CatOptions, opts ...formats.OpenOption) error {
	if o.Table == "" {
		o.Table = "accesses"
	}
	if o.Format == "" {
		o.Format = "csv"
	}
	header, ok := catHeaders[o.Table]
	if !ok {
		return usageErr("--table %q: want accesses, hints or files", o.Table)
	}
	if o.Format != "csv" && o.Format != "jsonl" {
		return usageErr("--format %q: want csv or jsonl", o.Format)
	}
	b, err := openBundle(dir, opts)
	if err != nil {
		return err
	}
	defer b.Close()

	bw := bufio.NewWriterSize(w, 1<<16)
	var emit func(csvRec []string, v any) error
	var cw *csv.Writer
	if o.Format == "csv" {
		cw = csv.NewWriter(bw)
		if err := cw.Write(header); err != nil {
			return err
		}
		emit = func(rec []string, _ any) error { return cw.Write(rec) }
	} else {
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		emit = func(_ []string, v any) error { return enc.Encode(v) }
	}
	n := 0
	limited := func() error {
		n++
		if o.Limit > 0 && n >= o.Limit {
			return errLimit
		}
		return nil
	}
	rec := make([]string, len(header))
	u := strconv.FormatUint
	switch o.Table {
	case "files":
		files, err := b.Files()
		if err != nil {
			return err // formats names the file
		}
		for _, f := range files {
			if o.Limit > 0 && n >= o.Limit {
				break
			}
			n++
			rec = append(rec[:0], u(uint64(f.ID), 10), u(f.Dev, 10), u(f.Ino, 10), f.Path, u(f.Size, 10), strconv.FormatInt(f.MtimeNS, 10), u(uint64(f.Mode), 10))
			if err := emit(rec, fileRow(f)); err != nil {
				return err
			}
		}
	case "accesses":
		err = forEachAccess(b, func(a *formats.Access) error {
			k := KindName(a.Kind)
			rec = append(rec[:0], u(a.TS, 10), u(uint64(a.PID), 10), u(uint64(a.TID), 10), a.Comm, u(uint64(a.FileID), 10), u(a.FirstPage, 10), u(uint64(a.NPages), 10), k,
				u(a.EndNS, 10), u(a.Op, 10), strconv.FormatInt(a.Ret, 10), u(uint64(a.Prot), 10), u(a.MapFirstPage, 10), u(a.MapPages, 10), u(uint64(a.TracerNS), 10), u(uint64(a.TracerCalls), 10))
			if err := emit(rec, accessRow{a.TS, a.PID, a.TID, a.Comm, a.FileID, a.FirstPage, a.NPages, k, a.EndNS, a.Op, a.Ret, a.Prot, a.MapFirstPage, a.MapPages, a.TracerNS, a.TracerCalls}); err != nil {
				return err
			}
			return limited()
		})
	case "hints":
		var sb strings.Builder
		err = forEachHint(b, func(h *formats.Hint) error {
			k := HintKindName(h.Kind)
			sb.Reset()
			for i, c := range h.Children {
				if i > 0 {
					sb.WriteByte(' ')
				}
				sb.WriteString(u(c, 10))
			}
			rec = append(rec[:0], u(h.TS, 10), u(uint64(h.PID), 10), k, u(uint64(h.FileID), 10), u(h.ParentPage, 10), u(uint64(h.Position), 10), sb.String(), h.Name, u(h.OffsetBytes, 10), u(h.LengthBytes, 10),
				u(uint64(h.TID), 10), h.Source)
			children := h.Children
			if children == nil {
				children = []uint64{}
			}
			if err := emit(rec, hintRow{h.TS, h.PID, k, h.FileID, h.ParentPage, h.Position, children, h.Name, h.OffsetBytes, h.LengthBytes, h.TID, h.Source}); err != nil {
				return err
			}
			return limited()
		})
	}
	if err != nil && !errors.Is(err, errLimit) {
		return fmt.Errorf("cat %s: %w", dir, err)
	}
	if cw != nil {
		cw.Flush()
		if err := cw.Error(); err != nil {
			return err
		}
	}
	return bw.Flush()
}
