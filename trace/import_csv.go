package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/predictio/predictio/formats"
)

// csvPresets are the column mappings of well-known block trace layouts.
var csvPresets = map[string]struct{ m, unit, note string }{
	// MSR Cambridge (SNIA IOTTA): Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime
	"msr": {"ts=0,host=1,dev=2,op=3,offset=4,size=5", "filetime",
		"MSR Cambridge timestamps are Windows filetime (100 ns ticks since 1601); ResponseTime is ignored"},
	// Alibaba block traces 2020: device_id,opcode,offset,length,timestamp
	"alibaba": {"dev=0,op=1,offset=2,size=3,ts=4", "unix-us",
		"Alibaba block trace timestamps are microseconds since the Unix epoch"},
}

var csvFields = map[string]bool{"ts": true, "offset": true, "size": true, "op": true, "dev": true, "host": true, "pid": true, "comm": true}

// tsUnits maps a --ts-unit to nanoseconds per unit and the Unix time of 0,
// for absolute units.
var tsUnits = map[string]struct {
	scale uint64
	epoch *time.Time
}{
	"ns": {1, nil}, "us": {1e3, nil}, "ms": {1e6, nil}, "s": {1e9, nil},
	"filetime": {100, ptr(time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC))},
	"unix-ns":  {1, ptr(time.Unix(0, 0).UTC())},
	"unix-us":  {1e3, ptr(time.Unix(0, 0).UTC())},
	"unix-ms":  {1e6, ptr(time.Unix(0, 0).UTC())},
	"unix-s":   {1e9, ptr(time.Unix(0, 0).UTC())},
}

func ptr[T any](v T) *T { return &v }

// csvMapping is a parsed --map with its options.
type csvMapping struct {
	spec   map[string]string // field -> index or column name
	col    map[string]int    // field -> column index, once resolved
	header bool
	unit   string
	note   string
}

func newCSVMapping(o ImportOptions) (*csvMapping, error) {
	cm := &csvMapping{spec: map[string]string{}, col: map[string]int{}, header: o.Header, unit: o.TSUnit}
	m := o.Map
	if o.Preset != "" {
		p, ok := csvPresets[o.Preset]
		if !ok {
			return nil, usageErr("--preset %q: want msr or alibaba", o.Preset)
		}
		if m == "" {
			m = p.m
		}
		if cm.unit == "" {
			cm.unit = p.unit
		}
		cm.note = p.note
	}
	if m == "" {
		return nil, usageErr("--from csv needs --map 'ts=COL,offset=COL,size=COL[,op=COL,dev=COL,pid=COL,comm=COL]' or --preset msr|alibaba")
	}
	if cm.unit == "" {
		cm.unit = "ns"
	}
	if _, ok := tsUnits[cm.unit]; !ok {
		return nil, usageErr("--ts-unit %q: want ns, us, ms, s, filetime, unix-s, unix-ms, unix-us or unix-ns", cm.unit)
	}
	for _, kv := range strings.Split(m, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return nil, usageErr("--map entry %q: want FIELD=COLUMN", kv)
		}
		if !csvFields[k] {
			return nil, usageErr("--map field %q: want ts, offset, size, op, dev, host, pid or comm", k)
		}
		if _, dup := cm.spec[k]; dup {
			return nil, usageErr("--map field %q given twice", k)
		}
		cm.spec[k] = v
		if i, err := strconv.Atoi(v); err == nil {
			if i < 0 || i > 1000 {
				return nil, usageErr("--map %s=%d: column index out of range 0..1000", k, i)
			}
			cm.col[k] = i
		} else {
			cm.header = true // a column name needs the header line
		}
	}
	for _, k := range []string{"ts", "offset", "size"} {
		if _, ok := cm.spec[k]; !ok {
			return nil, usageErr("--map lacks %s=COLUMN (ts, offset and size are required)", k)
		}
	}
	return cm, nil
}

// resolve maps column names to indexes using the header record.
func (cm *csvMapping) resolve(name string, header []string) error {
	idx := map[string]int{}
	for i, h := range header {
		idx[strings.TrimSpace(h)] = i
	}
	for k, v := range cm.spec {
		if _, ok := cm.col[k]; ok {
			continue
		}
		i, ok := idx[v]
		if !ok {
			return fmt.Errorf("%s:1: header: no column %q for --map %s (columns: %s)", name, v, k, strings.Join(header, ","))
		}
		cm.col[k] = i
	}
	return nil
}

// parseCSV reads a CSV block trace in two passes: the first finds the
// earliest timestamp, the second writes accesses rebased to it.
func parseCSV(im *importer, name string, cm *csvMapping) error {
	unit := tsUnits[cm.unit]
	var base uint64
	var haveBase bool
	err := scanCSV(name, cm, func(lr *lineReader, rec []string) error {
		ts, err := parseScaled(strings.TrimSpace(rec[cm.col["ts"]]), unit.scale)
		if err != nil {
			err = lr.fieldErr("ts", rec[cm.col["ts"]], err)
			if lr.n == 1 && !cm.header {
				err = fmt.Errorf("%w; if the first line holds column names, add --header", err)
			}
			return err
		}
		if !haveBase || ts < base {
			base, haveBase = ts, true
		}
		return nil
	})
	if err != nil {
		return err
	}
	if unit.epoch != nil {
		im.wallBase = time.Unix(unit.epoch.Unix()+int64(base/1e9), int64(base%1e9)).UTC()
	}
	hosts := map[string]bool{}
	im.notes = append(im.notes,
		"CSV block traces lack file identity: one pseudo-file per device column value (path blockdev:[HOST/]DEV, dev 0, ino 0)",
		"CSV block traces lack tid (and pid and comm unless mapped)",
		fmt.Sprintf("CSV timestamps in %s, rebased so the earliest is ts_ns 0", cm.unit))
	if cm.note != "" {
		im.notes = append(im.notes, cm.note)
	}
	err = scanCSV(name, cm, func(lr *lineReader, rec []string) error {
		im.rep.Lines++
		get := func(k string) (string, bool) {
			i, ok := cm.col[k]
			if !ok {
				return "", false
			}
			return strings.TrimSpace(rec[i]), true
		}
		tsv, _ := get("ts")
		ts, err := parseScaled(tsv, unit.scale)
		if err != nil {
			return lr.fieldErr("ts", tsv, err)
		}
		offv, _ := get("offset")
		off, err := strconv.ParseUint(offv, 10, 64)
		if err != nil {
			return lr.fieldErr("offset", offv, err)
		}
		sizev, _ := get("size")
		size, err := strconv.ParseUint(sizev, 10, 64)
		if err != nil {
			return lr.fieldErr("size", sizev, err)
		}
		op, opName := opRead, "read"
		if v, ok := get("op"); ok {
			op, opName = classifyOp(v), v
		}
		var pid uint64
		if v, ok := get("pid"); ok && v != "" {
			if pid, err = strconv.ParseUint(v, 10, 32); err != nil {
				return lr.fieldErr("pid", v, err)
			}
		}
		comm, _ := get("comm")
		key := "0"
		if v, ok := get("dev"); ok {
			key = v
		}
		if h, ok := get("host"); ok {
			key = h + "/" + key
			hosts[h] = true
		}
		id := im.file(key, formats.File{Path: "blockdev:" + key})
		if err := im.add(ts-base, id, off, size, op, opName, uint32(pid), comm); err != nil {
			return lr.fieldErr("size", sizev, err)
		}
		return nil
	})
	if len(hosts) == 1 {
		for h := range hosts {
			im.hostname = h
		}
	}
	return err
}

// scanCSV calls fn for each data record of the CSV file name, checking
// that every mapped column exists.
func scanCSV(name string, cm *csvMapping, fn func(lr *lineReader, rec []string) error) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	lr := &lineReader{name: name}
	r := csv.NewReader(&boundedReader{r: f, lr: lr})
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	r.LazyQuotes = true
	r.TrimLeadingSpace = true
	first := true
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return fmt.Errorf("%s:%d: %w", name, pe.Line, pe.Err)
			}
			if lr.tooLong {
				return fmt.Errorf("%s: a line is longer than %d bytes", name, maxLineBytes)
			}
			return fmt.Errorf("read %s: %w", name, err)
		}
		line, _ := r.FieldPos(0)
		lr.n = uint64(line)
		if first && cm.header {
			first = false
			if err := cm.resolve(name, rec); err != nil {
				return err
			}
			continue
		}
		first = false
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		for k, i := range cm.col {
			if i >= len(rec) {
				return fmt.Errorf("%s:%d: field %s: column %d missing (line has %d columns)", name, line, k, i, len(rec))
			}
		}
		if err := fn(lr, rec); err != nil {
			return err
		}
	}
}

// boundedReader fails when a single line exceeds maxLineBytes, so a file
// without newlines cannot make the CSV reader buffer it all.
type boundedReader struct {
	r   io.Reader
	lr  *lineReader
	run int
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	for _, c := range p[:n] {
		if c == '\n' {
			b.run = 0
		} else if b.run++; b.run > maxLineBytes {
			b.lr.tooLong = true
			return 0, errors.New("line too long")
		}
	}
	return n, err
}
