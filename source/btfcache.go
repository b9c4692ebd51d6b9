package source

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// The programs' CO-RE relocations are resolved against the kernel's BTF.
// Decoding the whole of /sys/kernel/btf/vmlinux (5 MB, ~150 K types) and
// indexing it by name takes cilium/ebpf ~18 ms here, most of the start-up
// budget of a traced command. So the types the programs name are copied,
// once per kernel, into a small BTF blob in a cache directory, and later
// starts resolve the relocations against that (well under a millisecond).
//
// What is kept: every kernel type whose name matches a named struct, union,
// enum or typedef in the programs' own BTF (the types their CO-RE accesses
// start from, flavours like task_struct___old stripped), with everything
// they contain by value (nested structs, unions, arrays, enums, integers,
// typedefs). A pointer member keeps its own type but points at a kept type
// only when that type is kept by name; otherwise at void. That is enough
// for every field, enum-value and existence relocation: each access
// through a pointer is its own relocation on the pointee's named type, and
// a pointer field matches a pointer field whatever it points at. The
// pruned and full specs yield the same relocated programs, which
// TestBTFCacheSameRelocations checks against the kernel's own translation.

// btfCacheVersion is bumped when the pruning rule changes.
const btfCacheVersion = 1

// DefaultBTFCacheDir is where the pruned kernel BTF is cached (root-owned,
// mode 0700).
const DefaultBTFCacheDir = "/var/cache/predictio/btf"

// vmlinuxBTF is the kernel's BTF.
var vmlinuxBTF = "/sys/kernel/btf/vmlinux"

// btfSource says where the kernel types came from.
type btfSource int

const (
	btfFull    btfSource = iota // decoded the whole kernel BTF (no cache)
	btfCached                   // read the pruned copy from the cache
	btfRebuilt                  // decoded the whole kernel BTF and wrote the cache
)

// kernelKey identifies the running kernel's BTF cheaply: its release and
// build string, the BTF's size, and a CRC32C of its header and of its last
// 4 KiB (reading all 5 MB costs ~2 ms).
func kernelKey() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	f, err := os.Open(vmlinuxBTF)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	const edge = 4096
	buf := make([]byte, 2*edge)
	n, err := f.ReadAt(buf[:edge], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read %s: %w", vmlinuxBTF, err)
	}
	m, err := f.ReadAt(buf[edge:], max(st.Size()-edge, 0))
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read %s: %w", vmlinuxBTF, err)
	}
	crc := crc32.Checksum(append(buf[:n], buf[edge:edge+m]...), crc32.MakeTable(crc32.Castagnoli))
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(u.Release[:])
	h.Write(u.Version[:])
	binary.Write(h, binary.LittleEndian, st.Size())
	binary.Write(h, binary.LittleEndian, crc)
	return fmt.Sprintf("%s-%08x", unix.ByteSliceToString(u.Release[:]), h.Sum32()), nil
}

// rootNames returns the essential names of the named types of the
// programs' BTF, sorted.
func rootNames(local *btf.Spec) []string {
	seen := make(map[string]bool)
	for t, err := range local.All() {
		if err != nil {
			break
		}
		switch t.(type) {
		case *btf.Struct, *btf.Union, *btf.Enum, *btf.Typedef:
		default:
			continue
		}
		name := t.TypeName()
		if name == "" {
			continue
		}
		if i := strings.Index(name, "___"); i > 0 {
			name = name[:i]
		}
		seen[name] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// cacheName is the cache file for a kernel and a set of root names.
func cacheName(key string, roots []string) string {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	fmt.Fprintf(h, "v%d\n", btfCacheVersion)
	for _, r := range roots {
		h.Write([]byte(r))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%s-%08x.btf", key, h.Sum32())
}

// kernelTypes returns the kernel types to resolve local's CO-RE relocations
// against: the pruned copy cached in dir when there is one for this kernel,
// else the full kernel BTF, from which the copy is then written (when dir
// can be written). dir "" disables the cache.
func kernelTypes(local *btf.Spec, dir string) (*btf.Spec, btfSource, error) {
	if dir == "" {
		ks, err := btf.LoadKernelSpec()
		return ks, btfFull, err
	}
	key, err := kernelKey()
	if err != nil {
		ks, err := btf.LoadKernelSpec()
		return ks, btfFull, err
	}
	roots := rootNames(local)
	path := filepath.Join(dir, cacheName(key, roots))
	if raw, err := os.ReadFile(path); err == nil {
		if spec, err := btf.LoadSpecFromReader(bytes.NewReader(raw)); err == nil {
			return spec, btfCached, nil
		}
		// A damaged cache file is rebuilt below.
	}
	ks, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, btfFull, err
	}
	raw, err := pruneBTF(ks, roots)
	if err != nil || writeCache(dir, path, raw) != nil {
		return ks, btfFull, nil
	}
	return ks, btfRebuilt, nil
}

// writeCache writes raw to path atomically in dir (created 0700).
func writeCache(dir, path string, raw []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".btf-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// pruneBTF copies the kernel types named roots (see the comment at the top
// of this file) and marshals them.
func pruneBTF(kernel *btf.Spec, roots []string) ([]byte, error) {
	p := &pruner{kernel: kernel, keep: make(map[btf.Type]bool), memo: make(map[btf.Type]btf.Type)}
	var kept []btf.Type
	for _, name := range roots {
		types, err := kernel.AnyTypesByName(name)
		if err != nil {
			continue // not in this kernel (an optional flavour)
		}
		for _, t := range types {
			switch t.(type) {
			case *btf.Struct, *btf.Union, *btf.Enum, *btf.Typedef:
				p.keep[t] = true
				kept = append(kept, t)
			}
		}
	}
	out := make([]btf.Type, 0, len(kept))
	for _, t := range kept {
		out = append(out, p.copy(t))
	}
	b, err := btf.NewBuilder(out, nil)
	if err != nil {
		return nil, fmt.Errorf("build pruned kernel BTF: %w", err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("marshal pruned kernel BTF: %w", err)
	}
	return raw, nil
}

type pruner struct {
	kernel *btf.Spec
	keep   map[btf.Type]bool
	memo   map[btf.Type]btf.Type
}

// copy copies t and what it contains by value; pointers to types not kept
// by name become pointers to void.
func (p *pruner) copy(t btf.Type) btf.Type {
	if c, ok := p.memo[t]; ok {
		return c
	}
	switch v := t.(type) {
	case *btf.Struct:
		c := &btf.Struct{Name: v.Name, Size: v.Size}
		p.memo[t] = c
		c.Members = p.members(v.Members)
		return c
	case *btf.Union:
		c := &btf.Union{Name: v.Name, Size: v.Size}
		p.memo[t] = c
		c.Members = p.members(v.Members)
		return c
	case *btf.Pointer:
		c := &btf.Pointer{Target: &btf.Void{}}
		p.memo[t] = c
		if target := p.namedTarget(v.Target); target != nil {
			c.Target = p.copy(target)
		}
		return c
	case *btf.Array:
		c := &btf.Array{Nelems: v.Nelems}
		p.memo[t] = c
		c.Index, c.Type = p.copy(v.Index), p.copy(v.Type)
		return c
	case *btf.Typedef:
		c := &btf.Typedef{Name: v.Name}
		p.memo[t] = c
		c.Type = p.copy(v.Type)
		return c
	case *btf.Const:
		c := &btf.Const{}
		p.memo[t] = c
		c.Type = p.copy(v.Type)
		return c
	case *btf.Volatile:
		c := &btf.Volatile{}
		p.memo[t] = c
		c.Type = p.copy(v.Type)
		return c
	case *btf.Restrict:
		c := &btf.Restrict{}
		p.memo[t] = c
		c.Type = p.copy(v.Type)
		return c
	case *btf.TypeTag:
		// Type tags (__rcu, __user) only qualify pointees.
		return p.copy(v.Type)
	case *btf.Enum:
		c := &btf.Enum{Name: v.Name, Size: v.Size, Signed: v.Signed, Values: slices.Clone(v.Values)}
		p.memo[t] = c
		return c
	case *btf.Int:
		c := &btf.Int{Name: v.Name, Size: v.Size, Encoding: v.Encoding}
		p.memo[t] = c
		return c
	case *btf.Float:
		c := &btf.Float{Name: v.Name, Size: v.Size}
		p.memo[t] = c
		return c
	case *btf.Fwd:
		c := &btf.Fwd{Name: v.Name, Kind: v.Kind}
		p.memo[t] = c
		return c
	default:
		// Functions, prototypes, variables: never contained by value.
		return &btf.Void{}
	}
}

func (p *pruner) members(ms []btf.Member) []btf.Member {
	out := make([]btf.Member, len(ms))
	for i, m := range ms {
		out[i] = btf.Member{Name: m.Name, Type: p.copy(m.Type), Offset: m.Offset, BitfieldSize: m.BitfieldSize}
	}
	return out
}

// namedTarget returns the pointee of a pointer when it is (after
// qualifiers) a type kept by name, else nil.
func (p *pruner) namedTarget(t btf.Type) btf.Type {
	for {
		switch v := t.(type) {
		case *btf.Const:
			t = v.Type
		case *btf.Volatile:
			t = v.Type
		case *btf.Restrict:
			t = v.Type
		case *btf.TypeTag:
			t = v.Type
		default:
			if p.keep[t] {
				return t
			}
			return nil
		}
	}
}
