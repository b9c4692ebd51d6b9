package source

import (
	"bytes"
	"embed"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
	"github.com/klauspost/compress/zstd"

	"github.com/predictio/predictio/bpf"
)

// TestCOREOtherKernels resolves every program's CO-RE relocations against
// the BTF of the other kernels the recorder supports (testdata/btf: the
// .BTF sections of Debian's 6.1 and 6.12 cloud kernels, zstd-compressed;
// scripts/extract-btf.sh makes them from the VM harness's kernel images)
// and loads the result here. A relocation that finds no match is poisoned
// (the verifier then rejects "invalid func unknown#195896080" where it is
// reached): that must not happen. Other verifier complaints are expected,
// since the relocated offsets are another kernel's while the verifier
// checks loads through kernel pointers against this kernel's types.
func TestCOREOtherKernels(t *testing.T) {
	requireSource(t)
	files, _ := fs.Glob(kernelBTF, "testdata/btf/*.btf.zst")
	if len(files) == 0 {
		t.Fatal("no kernel BTF in testdata/btf")
	}
	for _, f := range files {
		kernel := strings.TrimSuffix(path.Base(f), ".btf.zst")
		t.Run(kernel, func(t *testing.T) {
			kt := loadZstdBTF(t, f)
			spec, err := bpf.LoadRecord()
			if err != nil {
				t.Fatal(err)
			}
			for name := range spec.Programs {
				_, err := loadOne(spec, name, kt)
				if err == nil {
					continue
				}
				msg := err.Error()
				if strings.Contains(msg, "bad CO-RE relocation") || strings.Contains(msg, "195896080") {
					t.Errorf("%s: a CO-RE relocation finds no match in %s: %v", name, kernel, err)
				} else {
					t.Logf("%s: relocated; this kernel's verifier refuses another kernel's offsets (expected): %.120s", name, msg)
				}
			}
		})
	}
}

// kernelBTF is embedded so the test binary runs anywhere (in the VMs too).
//
//go:embed testdata/btf/*.btf.zst
var kernelBTF embed.FS

func loadZstdBTF(t *testing.T, name string) *btf.Spec {
	t.Helper()
	b, err := kernelBTF.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	raw, err := d.DecodeAll(b, nil)
	if err != nil {
		t.Fatalf("decompress %s: %v", name, err)
	}
	spec, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return spec
}
