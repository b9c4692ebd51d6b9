package source

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/formats"
)

// fixedRows is a ProcessFiles.Src of fixed rows.
type fixedRows map[uint32]formats.File

func (t fixedRows) File(id uint32) (formats.File, bool) {
	f, ok := t[id]
	return f, ok
}

func rowOf(t *testing.T, id uint32, path string) formats.File {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return formats.File{ID: id, Path: path, Dev: formats.KernelDev(st.Dev), Ino: st.Ino}
}

// TestProcessFiles: the adapters' files open as the accessing process
// could: another user's process gets a world-readable file but not a
// root-only one (with the kernel's check as that user; without a checker
// nothing of another user), a path that names another file now is
// refused, a symlink is resolved and the file opened under its own path,
// and a process that has exited gets the file it accessed.
func TestProcessFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SETUID, CAP_SETGID to check as another user)")
	}
	ac, err := NewAccessChecker()
	if err != nil {
		t.Skip(err)
	}
	defer ac.Close()
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir makes it 0700
	os.Chmod(dir, 0o755)
	open, secret, replaced := filepath.Join(dir, "open"), filepath.Join(dir, "secret"), filepath.Join(dir, "replaced")
	for _, p := range []string{open, secret, replaced} {
		if err := os.WriteFile(p, []byte("content of "+filepath.Base(p)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(secret, 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}
	rows := fixedRows{1: rowOf(t, 1, open), 2: rowOf(t, 2, secret), 3: rowOf(t, 3, replaced), 4: rowOf(t, 4, open)}
	r := rows[4]
	r.Path = link
	rows[4] = r
	// replaced is now another file under the same path.
	os.Rename(replaced, replaced+".old") // kept, so its inode number is not reused
	if err := os.WriteFile(replaced, []byte("another"), 0o644); err != nil {
		t.Fatal(err)
	}

	nobody := exec.Command("sleep", "30")
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	if err := nobody.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { nobody.Process.Kill(); nobody.Wait() }()
	pid := uint32(nobody.Process.Pid)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	gonePID := uint32(gone.Process.Pid)

	files := ProcessFiles{Src: rows, Access: ac, Creds: &ProcCreds{}}
	read := func(f ProcessFiles, id, pid uint32) (string, error) {
		c, err := f.Open(id, pid)
		if err != nil {
			return "", err
		}
		defer c.Close()
		b := make([]byte, 64)
		n, _ := c.ReadAt(b, 0)
		return string(b[:n]), nil
	}
	if got, err := read(files, 1, pid); err != nil || got != "content of open" {
		t.Errorf("world-readable file for nobody: %q, %v", got, err)
	}
	if _, err := read(files, 2, pid); !errors.Is(err, ErrNotReadable) {
		t.Errorf("root-only file for nobody: %v, want ErrNotReadable", err)
	}
	if got, err := read(files, 2, 0); err != nil || got != "content of secret" {
		t.Errorf("root-only file for this process: %q, %v", got, err)
	}
	if _, err := read(files, 3, 0); err == nil {
		t.Error("a path that names another file now was opened")
	}
	if got, err := read(files, 4, pid); err != nil || got != "content of open" {
		t.Errorf("file accessed through a symlink: %q, %v", got, err)
	}
	if got, err := read(files, 1, gonePID); err != nil || got != "content of open" {
		t.Errorf("file of an exited process: %q, %v", got, err)
	}
	if _, err := read(files, 9, 0); !errors.Is(err, adapters.ErrNoPath) {
		t.Errorf("unknown file: %v, want adapters.ErrNoPath", err)
	}
	noChecker := ProcessFiles{Src: rows}
	if _, err := read(noChecker, 1, pid); !errors.Is(err, ErrNotReadable) {
		t.Errorf("no checker, another user's process: %v, want ErrNotReadable", err)
	}
}
