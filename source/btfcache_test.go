package source

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/predictio/predictio/bpf"
)

// TestBTFCacheLifecycle: the first start writes the pruned copy (0600 in a
// 0700 directory), the next reads it, a damaged copy is rebuilt, and no
// directory means the full kernel BTF.
func TestBTFCacheLifecycle(t *testing.T) {
	if _, err := os.Stat(vmlinuxBTF); err != nil {
		t.Skipf("kernel has no BTF (CONFIG_DEBUG_INFO_BTF): %v", err)
	}
	spec, err := bpf.LoadRecord()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "btf")
	_, from, err := kernelTypes(spec.Types, dir)
	if err != nil || from != btfRebuilt {
		t.Fatalf("first start: source %d, err %v; want rebuilt", from, err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v, %v; want mode 0700", st.Mode(), err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.btf"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	if fi, _ := os.Stat(files[0]); fi.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v, want 0600", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(files[0]); fi.Size() > 1<<20 {
		t.Errorf("pruned BTF is %d bytes; the pruning keeps too much", fi.Size())
	}
	cached, from, err := kernelTypes(spec.Types, dir)
	if err != nil || from != btfCached {
		t.Fatalf("second start: source %d, err %v; want cached", from, err)
	}
	var task *btf.Struct
	if err := cached.TypeByName("task_struct", &task); err != nil {
		t.Fatalf("cached BTF lacks task_struct: %v", err)
	}
	if err := os.WriteFile(files[0], []byte("not BTF"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, from, err := kernelTypes(spec.Types, dir); err != nil || from != btfRebuilt {
		t.Fatalf("damaged cache: source %d, err %v; want rebuilt", from, err)
	}
	if _, from, err := kernelTypes(spec.Types, ""); err != nil || from != btfFull {
		t.Fatalf("no cache: source %d, err %v; want full", from, err)
	}
}

// TestBTFCacheSameRelocations loads every program of this kernel twice,
// with its CO-RE relocations resolved against the full kernel BTF and
// against the pruned copy, and compares what the kernel made of them (the
// translated instructions, map references aside): any field the pruning
// lost or placed wrongly changes an offset.
func TestBTFCacheSameRelocations(t *testing.T) {
	requireSource(t)
	full, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := bpf.LoadRecord()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := pruneBTF(full, rootNames(spec.Types))
	if err != nil {
		t.Fatal(err)
	}
	pruned, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, ps := range spec.Programs {
		a, errA := loadOne(spec, name, full)
		if errA != nil {
			// A program this kernel cannot load at all (a kprobe
			// fallback without kprobes, a tracepoint it lacks).
			t.Logf("%s (%s): not loadable here with the full BTF either: %v", name, ps.SectionName, errA)
			continue
		}
		b, errB := loadOne(spec, name, pruned)
		if errB != nil {
			t.Errorf("%s: loads with the full kernel BTF, not with the pruned one: %v", name, errB)
			continue
		}
		if d := diffXlated(t, a, b); d != "" {
			t.Errorf("%s: relocated differently with the pruned BTF: %s", name, d)
			continue
		}
		n++
	}
	if n == 0 {
		t.Fatal("no program could be compared")
	}
	t.Logf("%d programs relocate identically", n)
}

// loadOne loads program name of spec (with its maps) against kernel types kt.
func loadOne(spec *ebpf.CollectionSpec, name string, kt *btf.Spec) (*ebpf.Program, error) {
	s := spec.Copy()
	for n := range s.Programs {
		if n != name {
			delete(s.Programs, n)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(s, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: kt}})
	if err != nil {
		return nil, err
	}
	p := coll.DetachProgram(name)
	coll.Close()
	return p, nil
}

// diffXlated compares two loaded programs' translated instructions, with
// the constants of map-referencing loads (different maps) left out.
func diffXlated(t *testing.T, a, b *ebpf.Program) string {
	t.Helper()
	defer a.Close()
	defer b.Close()
	ia, err := a.Info()
	if err != nil {
		t.Fatal(err)
	}
	ib, err := b.Info()
	if err != nil {
		t.Fatal(err)
	}
	xa, err := ia.Instructions()
	if err != nil {
		t.Skipf("kernel does not return translated instructions: %v", err)
	}
	xb, err := ib.Instructions()
	if err != nil {
		t.Fatal(err)
	}
	if len(xa) != len(xb) {
		return "instruction count " + strconv.Itoa(len(xa)) + " vs " + strconv.Itoa(len(xb))
	}
	for i := range xa {
		x, y := xa[i], xb[i]
		if x.OpCode.IsDWordLoad() && x.Src != asm.R0 {
			x.Constant, y.Constant = 0, 0
		}
		if x.OpCode != y.OpCode || x.Dst != y.Dst || x.Src != y.Src || x.Offset != y.Offset || x.Constant != y.Constant {
			return "instruction " + strconv.Itoa(i) + ": " + fmt.Sprint(xa[i]) + " vs " + fmt.Sprint(xb[i])
		}
	}
	return ""
}
