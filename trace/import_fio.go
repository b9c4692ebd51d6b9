package trace

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/predictio/predictio/formats"
)

// fio iolog actions (fio's HOWTO, "Trace file format").
var fioFileActions = map[string]bool{"add": true, "open": true, "close": true}
var fioIOActions = map[string]bool{"read": true, "write": true, "trim": true, "sync": true, "datasync": true, "sync_file_range": true}

// parseFio reads a fio iolog, version 3 ("TIMESTAMP FILE ACTION [OFFSET
// LENGTH]", timestamps in microseconds since the job started) or version 2
// ("FILE ACTION [OFFSET LENGTH]", no timestamps: time advances only by the
// wait actions).
func parseFio(im *importer, name string, r io.Reader) error {
	lr := newLineReader(name, r)
	header, ok := lr.next()
	if !ok {
		if err := lr.err(); err != nil {
			return err
		}
		return fmt.Errorf("%s: empty file; want a fio iolog starting with %q", name, "fio version 3 iolog")
	}
	var v3 bool
	switch strings.TrimSpace(header) {
	case "fio version 3 iolog":
		v3 = true
	case "fio version 2 iolog":
		im.notes = append(im.notes, "fio iolog v2 has no timestamps: ts_ns advances only by wait actions")
	default:
		return lr.fieldErr("header", header, fmt.Errorf("want %q or %q (fio --write_iolog output)", "fio version 3 iolog", "fio version 2 iolog"))
	}
	im.notes = append(im.notes,
		"fio iolog lacks pid, tid, comm, dev, ino and file sizes: pid/tid are 0, comm is \"fio\", files are identified by path, size_bytes is the largest offset+length seen",
		"fio iolog v3 timestamps are microseconds since the job started (issue time)")
	var clock uint64 // ns, for v2
	for {
		line, ok := lr.next()
		if !ok {
			break
		}
		im.rep.Lines++
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var ts uint64
		if v3 {
			if len(f) < 3 {
				return lr.fieldErr("action", line, fmt.Errorf("want TIMESTAMP FILE ACTION [OFFSET LENGTH]"))
			}
			us, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return lr.fieldErr("timestamp", f[0], err)
			}
			if us > (1<<64-1)/1000 {
				return lr.fieldErr("timestamp", f[0], strconv.ErrRange)
			}
			ts = us * 1000
			f = f[1:]
		} else {
			if len(f) < 2 {
				return lr.fieldErr("action", line, fmt.Errorf("want FILE ACTION [OFFSET LENGTH]"))
			}
			ts = clock
		}
		// File names may contain spaces: take the action from the right.
		if act := f[len(f)-1]; fioFileActions[act] {
			path := strings.Join(f[:len(f)-1], " ")
			im.file(path, formats.File{Path: path})
			continue
		}
		if !v3 && len(f) >= 3 && f[len(f)-2] == "wait" {
			usec, err := strconv.ParseUint(f[len(f)-1], 10, 64)
			if err != nil {
				return lr.fieldErr("wait", f[len(f)-1], err)
			}
			clock += usec * 1000
			continue
		}
		if len(f) < 4 {
			return lr.fieldErr("action", line, fmt.Errorf("want FILE ACTION OFFSET LENGTH or FILE add|open|close"))
		}
		act := f[len(f)-3]
		if !fioIOActions[act] {
			return lr.fieldErr("action", act, fmt.Errorf("want read, write, trim, sync, datasync, sync_file_range, add, open or close"))
		}
		off, err := strconv.ParseUint(f[len(f)-2], 10, 64)
		if err != nil {
			return lr.fieldErr("offset", f[len(f)-2], err)
		}
		length, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			return lr.fieldErr("length", f[len(f)-1], err)
		}
		path := strings.Join(f[:len(f)-3], " ")
		id := im.file(path, formats.File{Path: path})
		op := opOther
		switch act {
		case "read":
			op = opRead
		case "write":
			op = opWrite
		}
		if err := im.add(ts, id, off, length, op, act, 0, "fio"); err != nil {
			return lr.fieldErr("length", f[len(f)-1], err)
		}
	}
	return lr.err()
}
