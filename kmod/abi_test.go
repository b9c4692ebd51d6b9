package kmod

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// abiStructs pairs each uapi struct with its Go mirror.
var abiStructs = []struct {
	c   string
	typ reflect.Type
}{
	{"predictio_entry", reflect.TypeOf(Entry{})},
	{"predictio_ring_hdr", reflect.TypeOf(ringHdr{})},
	{"predictio_register", reflect.TypeOf(register{})},
	{"predictio_config", reflect.TypeOf(Config{})},
	{"predictio_stats", reflect.TypeOf(Counters{})},
}

// TestABI compiles a C program against kmod/predictio_uapi.h and checks
// every struct size, field offset and field size, the ioctl numbers and the
// constants against the Go definitions.
func TestABI(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("no C compiler (gcc or cc) in PATH: cannot compile the uapi header")
		}
	}
	var src bytes.Buffer
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"predictio_uapi.h\"\n")
	src.WriteString("#define F(s, f) printf(\"field \" #s \" \" #f \" %zu %zu\\n\", offsetof(struct s, f), sizeof(((struct s *)0)->f))\n")
	src.WriteString("int main(void) {\n")
	want := map[string]uint64{}
	for _, s := range abiStructs {
		fmt.Fprintf(&src, "printf(\"size %s %%zu\\n\", sizeof(struct %s));\n", s.c, s.c)
		want["size "+s.c] = uint64(s.typ.Size())
		var covered uintptr
		for i := 0; i < s.typ.NumField(); i++ {
			f := s.typ.Field(i)
			name := f.Tag.Get("c")
			if name == "" {
				t.Fatalf("%s.%s has no c tag", s.typ.Name(), f.Name)
			}
			if f.Offset != covered {
				t.Errorf("%s.%s at offset %d leaves a gap after %d", s.typ.Name(), f.Name, f.Offset, covered)
			}
			covered = f.Offset + f.Type.Size()
			fmt.Fprintf(&src, "F(%s, %s);\n", s.c, name)
			want["field "+s.c+" "+name] = uint64(f.Offset)<<32 | uint64(f.Type.Size())
		}
		if covered != s.typ.Size() {
			t.Errorf("%s: fields cover %d of %d bytes", s.typ.Name(), covered, s.typ.Size())
		}
	}
	consts := []struct {
		name string
		val  uint64
	}{
		{"PREDICTIO_ABI_VERSION", ABIVersion},
		{"PREDICTIO_MAX_SLOTS", MaxSlots},
		{"PREDICTIO_MAX_ENTRY_PAGES", MaxEntryPages},
		{"PREDICTIO_MAX_WORKERS", MaxWorkers},
		{"PREDICTIO_MAX_RING_ENTRIES", MaxRingEntries},
		{"PREDICTIO_MAX_QUEUE_CAPACITY", MaxQueueCapacity},
		{"PREDICTIO_DEF_RING_ENTRIES", DefaultRingEntries},
		{"PREDICTIO_DEF_QUEUE_CAPACITY", DefaultQueueCapacity},
		{"PREDICTIO_DEF_INFLIGHT_LIMIT", DefaultInFlightLimit},
		{"PREDICTIO_DEF_WORKERS", DefaultWorkers},
		{"PREDICTIO_DEF_ITEM_PAGES", DefaultItemPages},
		{"PREDICTIO_RING_ENTRIES_OFF", ringEntriesOff},
		{"PREDICTIO_IOC_REGISTER_FD", uint64(iocRegisterFD)},
		{"PREDICTIO_IOC_UNREGISTER", uint64(iocUnregister)},
		{"PREDICTIO_IOC_NOTIFY", uint64(iocNotify)},
		{"PREDICTIO_IOC_CONFIG", uint64(iocConfig)},
		{"PREDICTIO_IOC_STATS", uint64(iocStats)},
		{"PREDICTIO_RING_SIZE(3)", ringEntriesOff + 3*uint64(unsafe.Sizeof(Entry{}))},
	}
	for _, c := range consts {
		fmt.Fprintf(&src, "printf(\"const %%s %%llu\\n\", %q, (unsigned long long)(%s));\n", c.name, c.name)
		want["const "+c.name] = c.val
	}
	src.WriteString("return 0;\n}\n")

	dir := t.TempDir()
	prog := filepath.Join(dir, "abi.c")
	if err := os.WriteFile(prog, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "abi")
	out, err := exec.Command(cc, "-Wall", "-Werror", "-I.", "-o", bin, prog).CombinedOutput()
	if err != nil {
		t.Fatalf("compile against predictio_uapi.h: %v\n%s", err, out)
	}
	out, err = exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run abi program: %v", err)
	}
	got := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch f[0] {
		case "size", "const":
			v, _ := strconv.ParseUint(f[2], 10, 64)
			got[f[0]+" "+f[1]] = v
		case "field":
			off, _ := strconv.ParseUint(f[3], 10, 64)
			sz, _ := strconv.ParseUint(f[4], 10, 64)
			got["field "+f[1]+" "+f[2]] = off<<32 | sz
		}
	}
	if len(got) != len(want) {
		t.Errorf("C program printed %d values, want %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: not printed by the C program", k)
		case g != w && strings.HasPrefix(k, "field "):
			t.Errorf("%s: C offset %d size %d, Go offset %d size %d", k, g>>32, g&0xffffffff, w>>32, w&0xffffffff)
		case g != w:
			t.Errorf("%s: C %d (%#x), Go %d (%#x)", k, g, g, w, w)
		}
	}
}

func TestRingSize(t *testing.T) {
	if got := ringSize(4096, 4096); got != 4096+4096*16 {
		t.Errorf("ringSize(4096) = %d", got)
	}
	if got := ringSize(3, 4096); got != 8192 {
		t.Errorf("ringSize(3) = %d, want rounding to 8192", got)
	}
}
