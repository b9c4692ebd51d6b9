package trace

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

type sink struct{ rows []formats.Access }

func (s *sink) Append(a *formats.Access) error { s.rows = append(s.rows, *a); return nil }

// checkParse checks one parse. With errPart set, err must contain it and
// checkParse returns false: there is nothing more to check. Otherwise err
// must be nil and the rows got must equal want.
func checkParse(t *testing.T, err error, errPart string, got, want []formats.Access) bool {
	t.Helper()
	if errPart != "" {
		if err == nil || !strings.Contains(err.Error(), errPart) {
			t.Fatalf("error = %v, want it to contain %q", err, errPart)
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows = %+v\nwant %+v", got, want)
	}
	return true
}

func newTestImporter(s *sink, ps uint64, all bool) *importer {
	return &importer{w: s, ps: ps, all: all, files: map[string]uint32{}, rep: ImportReport{Skipped: map[string]uint64{}}}
}

func acc(ts uint64, pid uint32, comm string, file uint32, page uint64, n uint32) formats.Access {
	return formats.Access{TS: ts, PID: pid, TID: pid, Comm: comm, FileID: file, FirstPage: page, NPages: n, Kind: formats.KindImported}
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseScaled(t *testing.T) {
	for _, tc := range []struct {
		in    string
		scale uint64
		want  uint64
		bad   bool
	}{
		{"0", 1e9, 0, false},
		{"1.5", 1e9, 1500000000, false},
		{"0.000140210", 1e9, 140210, false},
		{"12.000000001", 1e9, 12000000001, false},
		{".5", 1e3, 500, false},
		{"7", 100, 700, false},
		{"3.9", 1, 3, false},
		{"", 1, 0, true},
		{".", 1, 0, true},
		{"1e5", 1, 0, true},
		{"-1", 1, 0, true},
		{"1.2x", 1e9, 0, true},
		{"18446744073709551615", 2, 0, true},
	} {
		got, err := parseScaled(tc.in, tc.scale)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseScaled(%q, %d) = %d, %v; want %d, error %v", tc.in, tc.scale, got, err, tc.want, tc.bad)
		}
	}
}

const fioV2 = `fio version 2 iolog
/data/my file add
/data/my file open
/data/my file read 0 4096
/data/my file wait 100
/data/my file read 8192 8192
/data/my file write 0 4096
/data/my file close
`

func TestParseFio(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		all     bool
		want    []formats.Access
		paths   []string
		sizes   []uint64
		errPart string
	}{
		{
			name: "v3",
			in: "fio version 3 iolog\n25 /d/a add\n197 /d/a open\n201 /d/a read 61440 4096\n" +
				"492 /d/b read 4095 2\n500 /d/a write 0 8192\n600 /d/a trim 0 4096\n1720 /d/a close\n",
			want:  []formats.Access{acc(201000, 0, "fio", 0, 15, 1), acc(492000, 0, "fio", 1, 0, 2)},
			paths: []string{"/d/a", "/d/b"},
			sizes: []uint64{65536, 4097},
		},
		{
			name:  "v3 with writes",
			in:    "fio version 3 iolog\n1 /d/a write 0 8192\n2 /d/a read 8192 1\n",
			all:   true,
			want:  []formats.Access{acc(1000, 0, "fio", 0, 0, 2), acc(2000, 0, "fio", 0, 2, 1)},
			paths: []string{"/d/a"},
			sizes: []uint64{8193},
		},
		{
			name:  "v2 with spaces and wait",
			in:    fioV2,
			want:  []formats.Access{acc(0, 0, "fio", 0, 0, 1), acc(100000, 0, "fio", 0, 2, 2)},
			paths: []string{"/data/my file"},
			sizes: []uint64{16384},
		},
		{name: "no header", in: "1 /d/a read 0 1\n", errPart: "x.log:1: field header"},
		{name: "empty", in: "", errPart: "empty file"},
		{name: "bad offset", in: "fio version 3 iolog\n1 /d/a read zz 4096\n", errPart: `x.log:2: field offset: bad value "zz"`},
		{name: "bad length", in: "fio version 3 iolog\n1 /d/a read 0 -4\n", errPart: "x.log:2: field length"},
		{name: "bad timestamp", in: "fio version 3 iolog\nT /d/a read 0 4\n", errPart: "x.log:2: field timestamp"},
		{name: "bad action", in: "fio version 3 iolog\n1 /d/a jump 0 4\n", errPart: `x.log:2: field action: bad value "jump"`},
		{name: "short", in: "fio version 3 iolog\n1 /d/a\n", errPart: "x.log:2: field action"},
		{name: "overflow", in: "fio version 3 iolog\n1 /d/a read 18446744073709551615 2\n", errPart: "x.log:2: field length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sink{}
			im := newTestImporter(s, 4096, tc.all)
			err := parseFio(im, "x.log", strings.NewReader(tc.in))
			if !checkParse(t, err, tc.errPart, s.rows, tc.want) {
				return
			}
			var paths []string
			var sizes []uint64
			for _, f := range im.fileRows {
				paths, sizes = append(paths, f.Path), append(sizes, f.Size)
			}
			if !reflect.DeepEqual(paths, tc.paths) || !reflect.DeepEqual(sizes, tc.sizes) {
				t.Errorf("files %v sizes %v, want %v %v", paths, sizes, tc.paths, tc.sizes)
			}
		})
	}
}

// TestParseFioReal runs fio with --write_iolog and parses its real output.
func TestParseFioReal(t *testing.T) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		t.Skip("fio not installed (scripts/setup.sh installs it)")
	}
	dir := t.TempDir()
	data, log := filepath.Join(dir, "data"), filepath.Join(dir, "io.log")
	cmd := exec.Command(fio, "--name=t", "--filename="+data, "--size=1M", "--rw=randread", "--bs=8k",
		"--ioengine=psync", "--number_ios=50", "--randseed=3", "--write_iolog="+log)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fio: %v\n%s", err, out)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &sink{}
	im := newTestImporter(s, 4096, false)
	if err := parseFio(im, log, f); err != nil {
		t.Fatal(err)
	}
	if len(s.rows) != 50 {
		t.Fatalf("got %d accesses, want 50 (fio --number_ios=50)", len(s.rows))
	}
	if len(im.fileRows) != 1 || im.fileRows[0].Path != data {
		t.Fatalf("files = %+v, want one with path %s", im.fileRows, data)
	}
	var prev uint64
	for i, a := range s.rows {
		if a.NPages != 2 || a.FirstPage%2 != 0 || a.FirstPage >= 256 {
			t.Errorf("row %d: %+v: want an 8 KiB aligned read inside 1 MiB", i, a)
		}
		if a.TS < prev {
			t.Errorf("row %d: ts %d before %d", i, a.TS, prev)
		}
		prev = a.TS
	}
}

const blkSample = `  8,0    1        1     0.000000000  4321  Q   R 2048 + 8 [cat]
  8,0    1        2     0.000001500  4321  G   R 2048 + 8 [cat]
  8,0    1        3     0.000002000  4321  P   N [cat]
  8,0    1        4     0.000003000  4321  I   R 2048 + 8 [cat]
  8,0    1        5     0.000004000  4321  U   N [cat] 1
  8,0    1        6     0.000005000  4321  D   R 2048 + 8 [cat]
  8,0    0        1     0.000090000     0  C   R 2048 + 8 [0]
  8,0    1        7     0.000100000  4321  Q   R 2056 + 256 [cat]
  8,0    1        8     0.000200000  4321  Q  WS 4096 + 8 [sync]
  8,0    1        9     0.000300000  4321  Q FWS [kworker/1:1H]
  8,16   0        1     1.000400000    99  Q  RA 100 + 16 [my prog]
CPU0 (8,0):
 Reads Queued:           2,        8KiB	 Writes Queued:           0,        0KiB
Total (8,0):
 Reads Queued:           2,        8KiB	 Writes Queued:           1,        4KiB
Throughput (R/W): 0KiB/s / 0KiB/s
Events (8,0): 10 entries
`

func TestParseBlkparse(t *testing.T) {
	for _, tc := range []struct {
		name, in, action string
		all              bool
		want             []formats.Access
		errPart          string
	}{
		{name: "Q", in: blkSample, action: "Q", want: []formats.Access{
			acc(0, 4321, "cat", 0, 256, 1),
			acc(100000, 4321, "cat", 0, 257, 32),
			acc(1000400000, 99, "my prog", 1, 12, 3),
		}},
		{name: "Q all", in: blkSample, action: "Q", all: true, want: []formats.Access{
			acc(0, 4321, "cat", 0, 256, 1),
			acc(100000, 4321, "cat", 0, 257, 32),
			acc(200000, 4321, "sync", 0, 512, 1),
			acc(1000400000, 99, "my prog", 1, 12, 3),
		}},
		{name: "D", in: blkSample, action: "D", want: []formats.Access{acc(5000, 4321, "cat", 0, 256, 1)}},
		{name: "C", in: blkSample, action: "C", want: []formats.Access{acc(90000, 0, "0", 0, 256, 1)}},
		{name: "no events", in: "CPU0 (8,0):\n", action: "Q", errPart: "no Q events found"},
		{name: "bad sector", in: "8,0 1 1 0.1 5 Q R x + 8 [a]\n", action: "Q", errPart: `b.txt:1: field sector: bad value "x"`},
		{name: "bad time", in: "8,0 1 1 0,1 5 Q R 8 + 8 [a]\n", action: "Q", errPart: `b.txt:1: field timestamp`},
		{name: "bad pid", in: "8,0 1 1 0.1 -5 Q R 8 + 8 [a]\n", action: "Q", errPart: `b.txt:1: field pid`},
		{name: "bad count", in: "8,0 1 1 0.1 5 Q R 8 + z [a]\n", action: "Q", errPart: `b.txt:1: field count`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sink{}
			im := newTestImporter(s, 4096, tc.all)
			err := parseBlkparse(im, "b.txt", strings.NewReader(tc.in), tc.action)
			if !checkParse(t, err, tc.errPart, s.rows, tc.want) {
				return
			}
		})
	}
	s := &sink{}
	im := newTestImporter(s, 4096, false)
	if err := parseBlkparse(im, "b.txt", strings.NewReader(blkSample), "Q"); err != nil {
		t.Fatal(err)
	}
	want := []formats.File{
		{ID: 0, Dev: 8 << 20, Path: "blockdev:8,0", Size: (2056 + 256) * 512},
		{ID: 1, Dev: 8<<20 | 16, Path: "blockdev:8,16", Size: (100 + 16) * 512},
	}
	if !reflect.DeepEqual(im.fileRows, want) {
		t.Errorf("files = %+v, want %+v", im.fileRows, want)
	}
	if im.rep.Skipped["ws"] != 1 || im.rep.Skipped["fws (no sector range)"] != 1 {
		t.Errorf("skipped = %v, want one ws and one fws", im.rep.Skipped)
	}
}

const msrSample = `128166372003061629,usr,0,Read,10737418240,4096,1331
128166372003061630,usr,0,Write,1024,512,100
128166372002061629,usr,1,Read,4095,2,500
`

func TestParseCSV(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		o        ImportOptions
		want     []formats.Access
		paths    []string
		wall     time.Time
		errPart  string
		usage    bool
	}{
		{
			name:  "msr",
			in:    msrSample,
			o:     ImportOptions{Preset: "msr"},
			want:  []formats.Access{acc(100000000, 0, "", 0, 2621440, 1), acc(0, 0, "", 1, 0, 2)},
			paths: []string{"blockdev:usr/0", "blockdev:usr/1"},
			wall:  time.Unix(128166372002061629/10000000-11644473600, 128166372002061629%10000000*100).UTC(),
		},
		{
			name:  "alibaba",
			in:    "3,R,126703644672,4096,1577808000000000\n3,W,0,4096,1577808000000010\n5,R,8192,12288,1577808000000500\n",
			o:     ImportOptions{Preset: "alibaba"},
			want:  []formats.Access{acc(0, 0, "", 0, 30933507, 1), acc(500000, 0, "", 1, 2, 3)},
			paths: []string{"blockdev:3", "blockdev:5"},
			wall:  time.Unix(1577808000, 0).UTC(),
		},
		{
			name:  "header names",
			in:    "when,where,len,who,op\n1.5,4096,100,42,read\n0.5,0,8192,43,R\n",
			o:     ImportOptions{Map: "ts=when,offset=where,size=len,pid=who,op=op", TSUnit: "s"},
			want:  []formats.Access{acc(1500000000-500000000, 42, "", 0, 1, 1), acc(0, 43, "", 0, 0, 2)},
			paths: []string{"blockdev:0"},
		},
		{
			name:  "indexes with header and comm",
			in:    "ts,off,len,comm\n10,0,1,db\n",
			o:     ImportOptions{Map: "ts=0,offset=1,size=2,comm=3", Header: true, TSUnit: "us"},
			want:  []formats.Access{acc(0, 0, "db", 0, 0, 1)},
			paths: []string{"blockdev:0"},
		},
		{name: "bad offset", in: msrSample + "128166372003061629,usr,0,Read,abc,4096,1\n", o: ImportOptions{Preset: "msr"}, errPart: `t.csv:4: field offset: bad value "abc"`},
		{name: "bad ts", in: "x,usr,0,Read,0,4096,1\n", o: ImportOptions{Preset: "msr"}, errPart: `t.csv:1: field ts: bad value "x"`},
		{name: "missing column", in: "1,usr,0,Read\n", o: ImportOptions{Preset: "msr"}, errPart: "t.csv:1: field"},
		{name: "unknown header", in: "a,b\n1,2\n", o: ImportOptions{Map: "ts=a,offset=b,size=c"}, errPart: `t.csv:1: header: no column "c"`},
		{name: "no map", in: "1,2,3\n", o: ImportOptions{}, usage: true},
		{name: "bad field", in: "1,2,3\n", o: ImportOptions{Map: "ts=0,offset=1,size=2,color=3"}, usage: true},
		{name: "missing size", in: "1,2,3\n", o: ImportOptions{Map: "ts=0,offset=1"}, usage: true},
		{name: "bad unit", in: "1,2,3\n", o: ImportOptions{Map: "ts=0,offset=1,size=2", TSUnit: "fortnights"}, usage: true},
		{name: "bad preset", in: "1,2,3\n", o: ImportOptions{Preset: "nope"}, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "t.csv")
			if err := os.WriteFile(p, []byte(tc.in), 0o644); err != nil {
				t.Fatal(err)
			}
			cm, err := newCSVMapping(tc.o)
			if tc.usage {
				if err == nil || !strings.Contains(err.Error(), "usage") {
					t.Fatalf("error = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := &sink{}
			im := newTestImporter(s, 4096, false)
			err = parseCSV(im, p, cm)
			if !checkParse(t, err, strings.Replace(tc.errPart, "t.csv", p, 1), s.rows, tc.want) {
				return
			}
			var paths []string
			for _, f := range im.fileRows {
				paths = append(paths, f.Path)
			}
			if !reflect.DeepEqual(paths, tc.paths) {
				t.Errorf("paths = %v, want %v", paths, tc.paths)
			}
			if !im.wallBase.Equal(tc.wall) {
				t.Errorf("wall start = %v, want %v", im.wallBase, tc.wall)
			}
		})
	}
}

func TestCSVLongLine(t *testing.T) {
	p := writeTemp(t, "long.csv", strings.Repeat("1", maxLineBytes+10))
	cm, err := newCSVMapping(ImportOptions{Map: "ts=0,offset=0,size=0"})
	if err != nil {
		t.Fatal(err)
	}
	err = parseCSV(newTestImporter(&sink{}, 4096, false), p, cm)
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("error = %v, want a line-too-long error", err)
	}
}
