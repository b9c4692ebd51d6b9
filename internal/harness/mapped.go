package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FileID names a file as /proc/PID/maps does: its device's major and
// minor numbers and its inode.
type FileID struct {
	Major, Minor uint32
	Ino          uint64
}

// Proc is a process that maps a file.
type Proc struct {
	PID  int
	Comm string
}

func (p Proc) String() string { return fmt.Sprintf("%s (%d)", p.Comm, p.PID) }

// Mappers returns, for each of ids that some process maps, the processes
// that map it, in one pass over /proc/PID/maps (processes that exit or
// cannot be read meanwhile are skipped). Pages mapped into a process's
// page tables are what drop_caches and POSIX_FADV_DONTNEED leave cached.
func Mappers(ids []FileID) map[FileID][]Proc {
	if len(ids) == 0 {
		return nil
	}
	want := make(map[string]FileID, len(ids))
	for _, id := range ids {
		want[fmt.Sprintf("%02x:%02x %d", id.Major, id.Minor, id.Ino)] = id
	}
	out := make(map[FileID][]Proc)
	maps, _ := filepath.Glob("/proc/[0-9]*/maps")
	for _, m := range maps {
		found := mapsFiles(m, want)
		if len(found) == 0 {
			continue
		}
		dir := filepath.Dir(m)
		pid, _ := strconv.Atoi(filepath.Base(dir))
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		p := Proc{PID: pid, Comm: strings.TrimSpace(string(comm))}
		for _, id := range found {
			out[id] = append(out[id], p)
		}
	}
	return out
}

// mapsFiles returns the files of want that one /proc/PID/maps names
// (keyed "MAJ:MIN INO"), each once.
func mapsFiles(path string, want map[string]FileID) []FileID {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var found []FileID
	seen := make(map[FileID]bool)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 5 || string(fields[4]) == "0" {
			continue
		}
		id, ok := want[string(fields[3])+" "+string(fields[4])]
		if ok && !seen[id] {
			seen[id] = true
			found = append(found, id)
		}
	}
	return found
}

// MappersText says who maps a file: "bash (4711)", or "12 processes:
// bash (4711), python3 (4712), ..." (four named); "" for none.
func MappersText(ps []Proc) string {
	names := make([]string, 0, min(len(ps), 4))
	for i, p := range ps {
		if i == 4 {
			break
		}
		names = append(names, p.String())
	}
	switch {
	case len(ps) == 0:
		return ""
	case len(ps) == 1:
		return names[0]
	case len(ps) > 4:
		return fmt.Sprintf("%d processes: %s, ...", len(ps), strings.Join(names, ", "))
	}
	return fmt.Sprintf("%d processes: %s", len(ps), strings.Join(names, ", "))
}
