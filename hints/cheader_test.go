package hints

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCHeader compiles a C program against predictio_hints.h, has it send
// one hint of each kind to a socket, and decodes them with Decode.
func TestCHeader(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "send.c")
	prog := `#include "predictio_hints.h"
#include <fcntl.h>
#include <stdio.h>
int main(int argc, char **argv) {
	(void)argc;
	if (pio_hints_dial(argv[3]) || errno != ENOENT) { fprintf(stderr, "dial %s: want ENOENT\n", argv[3]); return 1; }
	struct pio_hints *h = pio_hints_dial(argv[1]);
	if (!h) { perror("dial"); return 1; }
	uint64_t kids[] = {10, 11, 12};
	if (pio_tree_child_enter(h, "/data/index.db", -1, 3, 1, kids, 3)) { perror("tree"); return 1; }
	int fd = open(argv[2], O_RDONLY);
	if (fd < 0 || pio_tensor_layout(h, NULL, fd, "layers.0.w", 4096, 8192)) { perror("tensor"); return 1; }
	if (pio_layer_start(h, "/models/m.bin", -1, 7)) { perror("layer"); return 1; }
	if (pio_layer_start(h, "", -1, 7) != -1 || errno != EINVAL) { fprintf(stderr, "empty path accepted\n"); return 1; }
	if (pio_layer_start(h, NULL, -1, 7) != -1 || errno != EBADF) { fprintf(stderr, "fd -1 accepted\n"); return 1; }
	if (pio_hints_dropped(h) != 0) { fprintf(stderr, "dropped %llu\n", (unsigned long long)pio_hints_dropped(h)); return 1; }
	return pio_hints_close(h);
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := compileC(t, dir, "send", prog)
	sock := filepath.Join(dir, "h.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, sock, src, filepath.Join(dir, "absent.sock")).CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	buf := make([]byte, MaxDatagram+1)
	oob := make([]byte, 64)
	var msgs []Message
	for range 3 {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		var m Message
		if err := Decode(buf[:n], &m); err != nil {
			t.Fatalf("decode datagram %x: %v", buf[:n], err)
		}
		m.Path, m.Name = slices.Clone(m.Path), slices.Clone(m.Name)
		if m.Flags&FlagFD != 0 {
			cms, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil || len(cms) != 1 {
				t.Fatalf("fd hint without SCM_RIGHTS: %v", err)
			}
			fds, err := unix.ParseUnixRights(&cms[0])
			if err != nil || len(fds) != 1 {
				t.Fatalf("fd hint rights: %v %v", fds, err)
			}
			var st1, st2 unix.Stat_t
			unix.Fstat(fds[0], &st1)
			unix.Stat(src, &st2)
			if st1.Ino != st2.Ino {
				t.Errorf("passed fd is not %s", src)
			}
			unix.Close(fds[0])
		}
		msgs = append(msgs, m)
	}
	if m := msgs[0]; m.Kind != KindTreeChildEnter || string(m.Path) != "/data/index.db" || m.ParentPage != 3 || m.Position != 1 || !slices.Equal(m.Children, []uint64{10, 11, 12}) {
		t.Errorf("tree_child_enter from C: %+v", m)
	}
	if m := msgs[1]; m.Kind != KindTensorLayout || m.Flags != FlagFD || string(m.Name) != "layers.0.w" || m.Offset != 4096 || m.Length != 8192 {
		t.Errorf("tensor_layout from C: %+v", m)
	}
	if m := msgs[2]; m.Kind != KindLayerStart || string(m.Path) != "/models/m.bin" || m.Layer != 7 {
		t.Errorf("layer_start from C: %+v", m)
	}
	if n, _, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT); err == nil {
		t.Errorf("unexpected datagram %x (nothing was dropped)", buf[:n])
	}
}
