package simulate

import (
	"fmt"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// Input is a bundle opened for simulation: its file table and page size.
type Input struct {
	Dir      string
	Bundle   *formats.Bundle
	Files    []formats.File
	PageSize int

	eofDense []uint64 // by file id, when ids are small
	eofMap   map[uint32]uint64
	keys     map[uint32]policies.FileKey
	// known holds the file ids when the reference check is left to the
	// sources (DeferReferenceCheck); nil when OpenInput made it.
	known *idSet
}

// InputOption configures OpenInput.
type InputOption func(*inputConfig)

type inputConfig struct{ deferRefs bool }

// DeferReferenceCheck makes OpenInput leave the check that every row
// references a file of files.arrow (Bundle.CheckReferences) to the pass
// that simulates the bundle: Input.Source's batches check each row's
// file_id as they are decoded, and the first miss stops Run with the
// error CheckReferences returns, before any result is reported. Future
// checks the whole bundle first. Without it OpenInput checks the bundle
// in a pass of its own, which users of Input.Bundle rely on.
func DeferReferenceCheck() InputOption { return func(c *inputConfig) { c.deferRefs = true } }

// maxDenseFileID bounds the file-id-indexed table of file sizes.
const maxDenseFileID = 1 << 20

// OpenInput opens the bundle in dir, reads its file table and checks that
// every row references a file of it (unless DeferReferenceCheck).
func OpenInput(dir string, opts ...InputOption) (*Input, error) {
	var cfg inputConfig
	for _, o := range opts {
		o(&cfg)
	}
	b, err := formats.Open(dir) // its errors name the bundle
	if err != nil {
		return nil, err
	}
	files, err := b.Files()
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	// Rows whose file is missing have no size or identity (issue 17).
	if !cfg.deferRefs {
		if err := b.CheckReferences(); err != nil {
			b.Close()
			return nil, err
		}
	}
	ps := b.Manifest().Host.PageSize
	switch {
	case ps == 0:
		ps = 4096
	case ps < 512 || ps > 1<<20 || ps&(ps-1) != 0:
		b.Close()
		return nil, fmt.Errorf("open bundle %s: manifest field host.page_size is %d, want a power of two in [512, 1MiB]", dir, ps)
	}
	in := &Input{Dir: dir, Bundle: b, Files: files, PageSize: ps, keys: map[uint32]policies.FileKey{}}
	if cfg.deferRefs {
		in.known = &idSet{}
		for _, f := range files {
			in.known.add(f.ID)
		}
	}
	var maxID uint32
	for _, f := range files {
		maxID = max(maxID, f.ID)
	}
	if len(files) > 0 && maxID < maxDenseFileID {
		in.eofDense = make([]uint64, maxID+1)
	} else {
		in.eofMap = map[uint32]uint64{}
	}
	for _, f := range files {
		eof := (f.Size + uint64(ps) - 1) / uint64(ps)
		if in.eofDense != nil {
			in.eofDense[f.ID] = eof
		} else {
			in.eofMap[f.ID] = eof
		}
		if f.Path != "" {
			in.keys[f.ID] = policies.FileKey{Path: f.Path, Size: f.Size, MtimeNS: f.MtimeNS}
		}
	}
	return in, nil
}

// Close closes the bundle.
func (in *Input) Close() error { return in.Bundle.Close() }

// FilePages returns the end of file in pages, 0 when unknown.
func (in *Input) FilePages(file uint32) uint64 {
	if in.eofDense != nil {
		if int(file) < len(in.eofDense) {
			return in.eofDense[file]
		}
		return 0
	}
	return in.eofMap[file]
}

// FileKey returns the identity of file for trained models.
func (in *Input) FileKey(file uint32) (policies.FileKey, bool) {
	k, ok := in.keys[file]
	return k, ok
}

// Env returns the policy environment of the bundle: page size, file sizes
// and identities, the kernel it was recorded on (when its release parses)
// for the readahead model, and the bundle's files for launch profiles.
func (in *Input) Env() policies.Env {
	env := policies.Env{PageSize: in.PageSize, FilePages: in.FilePages, FileKey: in.FileKey,
		LaunchFile: policies.BundleLaunchFiles(in.Files)}
	if k := in.Bundle.Manifest().Host.KernelRelease; k != "" {
		if _, err := policies.ParseKernelVersion(k); err == nil {
			env.Kernel = k
		}
	}
	return env
}

// Paths returns the recorded path of every file that has one, by file id,
// but block devices (their rows are metadata reads: BlockFiles).
func (in *Input) Paths() map[uint32]string {
	m := make(map[uint32]string, len(in.keys))
	for _, f := range in.Files {
		if f.Path != "" && !f.Block() {
			m[f.ID] = f.Path
		}
	}
	return m
}

// BlockFiles returns the ids of the bundle's block devices (Config.BlockFiles),
// or nil when it has none.
func (in *Input) BlockFiles() map[uint32]bool {
	var m map[uint32]bool
	for i := range in.Files {
		m = AddBlockFile(m, &in.Files[i])
	}
	return m
}

// AddBlockFile adds f's id to m (made when nil) when f is a block device,
// for Config.BlockFiles, and returns m.
func AddBlockFile(m map[uint32]bool, f *formats.File) map[uint32]bool {
	if f.Block() {
		if m == nil {
			m = map[uint32]bool{}
		}
		m[f.ID] = true
	}
	return m
}

// Dirs indexes the directories of the bundle's files for the host model
// (Config.Dirs).
func (in *Input) Dirs() *Dirs {
	fs := make([]DirFile, 0, len(in.Files))
	for _, f := range in.Files {
		fs = append(fs, DirFile{ID: f.ID, Path: f.Path, Size: f.Size})
	}
	return NewDirs(fs, in.PageSize)
}

// Source streams the bundle's events. With DeferReferenceCheck, Run
// checks the rows' file references as it reads them.
func (in *Input) Source() (Source, error) {
	src, err := BundleSource(in.Bundle)
	if err != nil {
		return nil, err
	}
	if in.known != nil {
		src.(*bundleSource).known = in.known
	}
	return src, nil
}

// Future reads the bundle's demand accesses for the oracle into a
// materialized Future, which holds every demand page in memory: 8 bytes
// each. Run streams the future instead when Env.Future is left nil.
func (in *Input) Future() (*policies.Future, error) {
	if in.known != nil {
		if err := in.Bundle.CheckReferences(); err != nil {
			return nil, err
		}
	}
	cur, err := in.Bundle.Accesses()
	if err != nil {
		return nil, fmt.Errorf("read accesses of %s: %w", in.Dir, err)
	}
	defer cur.Close()
	var b policies.FutureBuilder
	for cur.Next() {
		a := cur.At()
		if policies.IsDemand(a.Kind) {
			b.Add(policies.FutureAccess{File: a.FileID, Page: a.FirstPage, NPages: a.NPages})
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read accesses of %s: %w", in.Dir, err)
	}
	return b.Future(), nil
}
