package simulate

import "path/filepath"

// Dirs tells the host model which directory each file's path lookup goes
// through, and how many blocks each directory holds, so that it can model
// the directory blocks a cold lookup reads from the device (Config.Dirs).
type Dirs struct {
	parent map[uint32]int32 // a file's directory
	self   map[uint32]int32 // a file's own path as a directory (readdir rows)
	pages  []uint64         // by directory: its size in pages, 0 unknown
}

// DirFile is one file of NewDirs: its id, path and size in bytes.
type DirFile struct {
	ID   uint32
	Path string
	Size uint64
}

// NewDirs indexes the directories of files' paths. Files without a path
// have none. A directory's size is known where it is itself one of files
// (a directory the program opened or read).
func NewDirs(files []DirFile, pageSize int) *Dirs {
	d := &Dirs{parent: make(map[uint32]int32, len(files)), self: make(map[uint32]int32, len(files))}
	idx := map[string]int32{}
	intern := func(p string) int32 {
		i, ok := idx[p]
		if !ok {
			i = int32(len(d.pages))
			idx[p] = i
			d.pages = append(d.pages, 0)
		}
		return i
	}
	ps := uint64(max(pageSize, 1))
	for _, f := range files {
		if f.Path == "" {
			continue
		}
		p := filepath.Clean(f.Path)
		i := intern(p)
		d.self[f.ID] = i
		d.pages[i] = (f.Size + ps - 1) / ps
		if dir := filepath.Dir(p); dir != p {
			d.parent[f.ID] = intern(dir)
		}
	}
	return d
}

// Len is the number of paths indexed as directories.
func (d *Dirs) Len() int { return len(d.pages) }

// parentOf returns the index of file's directory, or -1.
func (d *Dirs) parentOf(file uint32) int32 {
	if i, ok := d.parent[file]; ok {
		return i
	}
	return -1
}

// selfOf returns the index of file's path as a directory, or -1.
func (d *Dirs) selfOf(file uint32) int32 {
	if i, ok := d.self[file]; ok {
		return i
	}
	return -1
}

// lookupReads is how many blocks of directory i a lookup of one name
// reads when none is cached: one for a directory of one block (or of
// unknown size), two for a larger one (ext4's hashed index: its root and
// one leaf, one after the other).
func (d *Dirs) lookupReads(i int32) int {
	if d.pages[i] > 1 {
		return 2
	}
	return 1
}

// small reports whether directory i is known to fit one block, so that a
// lookup in it leaves the whole directory cached.
func (d *Dirs) small(i int32) bool { return d.pages[i] == 1 }
