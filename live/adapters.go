package live

import (
	"fmt"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/source"
)

// ErrNotReadable means the process an adapter reads a file for may not
// read it (source.ErrNotReadable).
var ErrNotReadable = source.ErrNotReadable

// AdapterFiles returns the adapters.Files of the loop's source files:
// source.ProcessFiles, with the loop's access checker (Config.Access) and
// credential cache. A file is opened only under its path in the accessing
// process's mount namespace, only if it is the file the access was
// observed on, and only if that process may read it (see
// source.ProcessFiles).
func (l *Loop) AdapterFiles() adapters.Files { return loopFiles{l} }

type loopFiles struct{ l *Loop }

// FileSize returns file's size when the source first saw it.
func (f loopFiles) FileSize(file uint32) (uint64, bool) {
	if f.l.src == nil || file >= profileBase {
		return 0, false
	}
	return source.ProcessFiles{Src: f.l.src}.FileSize(file)
}

func (f loopFiles) Open(file, pid uint32) (adapters.Content, error) {
	l := f.l
	if l.src == nil || file >= profileBase {
		return nil, fmt.Errorf("open file %d: %w", file, adapters.ErrNoPath)
	}
	return source.ProcessFiles{Src: l.src, Access: l.cfg.Access, Creds: &l.creds.ProcCreds}.Open(file, pid)
}
