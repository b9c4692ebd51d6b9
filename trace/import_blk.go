package trace

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/predictio/predictio/formats"
)

// sectorSize is the unit of blktrace sector numbers and counts.
const sectorSize = 512

// parseBlkparse reads blkparse's default text output:
//
//	8,0    1      12     0.000140210  4242  Q   R 2048 + 8 [cat]
//
// (device, CPU, sequence, seconds since the trace started, pid, action,
// RWBS, sector + count, [process]). Only the given action (Q, D or C) is
// imported; other actions, and lines that are not events (blkparse's
// per-CPU summary), are ignored.
func parseBlkparse(im *importer, name string, r io.Reader, action string) error {
	lr := newLineReader(name, r)
	im.notes = append(im.notes,
		"blkparse text lacks file identity: one pseudo-file per block device (path blockdev:MAJ,MIN, dev = MAJ<<20|MIN, ino 0), pages are 512-byte sectors converted to page-size units",
		"blkparse text lacks tid; pid and comm are those blktrace reported for the "+action+" action (for D and C often a kworker or 0)",
		"blkparse timestamps are seconds since blktrace started, not CLOCK_MONOTONIC")
	var events uint64
	for {
		line, ok := lr.next()
		if !ok {
			break
		}
		im.rep.Lines++
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		maj, min, ok := parseMajMin(f[0])
		if !ok {
			continue // summary or other non-event line
		}
		if f[5] != action {
			continue
		}
		events++
		// ACTION RWBS SECTOR + COUNT [COMM]
		if len(f) < 10 || f[8] != "+" {
			// e.g. a flush without a sector range: "Q FWS [kworker]".
			if len(f) >= 7 {
				im.rep.Skipped[strings.ToLower(f[6])+" (no sector range)"]++
				continue
			}
			return lr.fieldErr("sector", line, fmt.Errorf("want ACTION RWBS SECTOR + COUNT [COMM]"))
		}
		ts, err := parseScaled(f[3], 1e9)
		if err != nil {
			return lr.fieldErr("timestamp", f[3], err)
		}
		pid, err := strconv.ParseUint(f[4], 10, 32)
		if err != nil {
			return lr.fieldErr("pid", f[4], err)
		}
		sector, err := strconv.ParseUint(f[7], 10, 64)
		if err != nil {
			return lr.fieldErr("sector", f[7], err)
		}
		count, err := strconv.ParseUint(f[9], 10, 32)
		if err != nil {
			return lr.fieldErr("count", f[9], err)
		}
		if sector > (1<<64-1)/sectorSize {
			return lr.fieldErr("sector", f[7], strconv.ErrRange)
		}
		comm := ""
		if len(f) > 10 {
			comm = strings.TrimSuffix(strings.TrimPrefix(strings.Join(f[10:], " "), "["), "]")
		}
		rwbs := f[6]
		op := opOther
		switch {
		case strings.Contains(rwbs, "D"): // discard
		case strings.Contains(rwbs, "R"):
			op = opRead
		case strings.Contains(rwbs, "W"):
			op = opWrite
		}
		key := f[0]
		id := im.file(key, formats.File{Dev: uint64(maj)<<20 | uint64(min), Path: "blockdev:" + key})
		if err := im.add(ts, id, sector*sectorSize, count*sectorSize, op, rwbs, uint32(pid), comm); err != nil {
			return lr.fieldErr("count", f[9], err)
		}
	}
	if err := lr.err(); err != nil {
		return err
	}
	if events == 0 {
		return fmt.Errorf("%s: no %s events found; is this blkparse's default text output (try --action D)?", name, action)
	}
	return nil
}

// parseMajMin parses "8,0".
func parseMajMin(s string) (maj, min uint32, ok bool) {
	a, b, found := strings.Cut(s, ",")
	if !found {
		return 0, 0, false
	}
	x, err1 := strconv.ParseUint(a, 10, 12)
	y, err2 := strconv.ParseUint(b, 10, 20)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uint32(x), uint32(y), true
}
