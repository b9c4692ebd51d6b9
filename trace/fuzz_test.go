package trace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzImport feeds arbitrary text to the fio, blkparse and CSV parsers:
// they must return rows or an error, never panic or hang.
func FuzzImport(f *testing.F) {
	f.Add(fioV2)
	f.Add("fio version 3 iolog\n1 /d/a add\n5 /d/a read 0 8192\n9 /d b read 40960 4096\n")
	f.Add(blkSample)
	f.Add(msrSample)
	f.Add("3,R,126703644672,4096,1577808000000000\n")
	f.Add("fio version 3 iolog\n18446744073709551615 /a read 18446744073709551615 18446744073709551615\n")
	f.Add("8,0 1 1 99999999999999999999.9 1 Q R 36028797018963967 + 4294967295 [x]\n")
	f.Fuzz(func(t *testing.T, in string) {
		for _, from := range []string{"fio", "blkparse"} {
			im := newTestImporter(&sink{}, 4096, true)
			if from == "fio" {
				parseFio(im, "f", strings.NewReader(in))
			} else {
				parseBlkparse(im, "f", strings.NewReader(in), "Q")
			}
			checkRows(t, im)
		}
		p := filepath.Join(t.TempDir(), "in.csv")
		if err := os.WriteFile(p, []byte(in), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, o := range []ImportOptions{{Preset: "msr"}, {Preset: "alibaba"}, {Map: "ts=0,offset=1,size=2,op=3,pid=4,comm=5", TSUnit: "s"}} {
			cm, err := newCSVMapping(o)
			if err != nil {
				t.Fatal(err)
			}
			im := newTestImporter(&sink{}, 4096, true)
			parseCSV(im, p, cm)
			checkRows(t, im)
		}
	})
}

func checkRows(t *testing.T, im *importer) {
	for _, a := range im.w.(*sink).rows {
		if a.NPages == 0 || int(a.FileID) >= len(im.fileRows) {
			t.Fatalf("bad row %+v (%d files)", a, len(im.fileRows))
		}
	}
}
