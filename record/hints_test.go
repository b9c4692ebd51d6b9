package record

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/hints"

	"github.com/predictio/predictio/internal/tracetest"
)

// waitSocket waits for the recorder to create its hint socket, or to end
// (then its error is the failure). The bound is generous: the first start
// on a kernel builds the BTF cache, which takes seconds in an emulated VM.
func waitSocket[R any](t *testing.T, path string, res chan R) {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if st, err := os.Stat(path); err == nil && st.Mode()&os.ModeSocket != 0 && connects(path) {
			return
		}
		select {
		case r := <-res:
			t.Fatalf("recording ended before its hint socket appeared: %+v", r)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("hint socket %s never appeared", path)
}

// connects reports whether a datagram socket connects to path: bind(2)
// creates the socket's file before the socket can be found through it, so
// a connect in between fails with ECONNREFUSED (seen on a slow emulated
// 6.1 VM).
func connects(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: path}) == nil
}

// sendRaw sends b to the socket, with forged credentials when uid != 0
// (root may claim any uid in SCM_CREDENTIALS).
func sendRaw(t *testing.T, sock string, b []byte, uid uint32) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var oob []byte
	if uid != 0 {
		oob = unix.UnixCredentials(&unix.Ucred{Pid: int32(os.Getpid()), Uid: uid, Gid: uid})
	}
	if err := unix.Sendmsg(fd, b, oob, &unix.SockaddrUnix{Name: sock}, 0); err != nil {
		t.Fatalf("send %d-byte datagram as uid %d: %v", len(b), uid, err)
	}
}

func TestHints(t *testing.T) {
	requireRecorder(t)
	dir := tracetest.DiskDir(t)
	// Searchable by the uid nobody senders below (the kernel's access
	// check walks the path as the sender).
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "index.db")
	if err := os.WriteFile(data, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret.bin")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "hints.sock")
	const nobody = 65534

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		r   *recorded
		err error
	}
	res := make(chan result, 1)
	go func() {
		r, err := recordE(t, ctx, Config{
			Command: []string{"sleep", "60"}, HintSocket: sock, HintUIDs: []uint32{nobody},
		})
		res <- result{r, err}
	}()
	waitSocket(t, sock, res)

	c, err := hints.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.TreeChildEnter(hints.Path(data), 3, 1, []uint64{10, 11, 12}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.TensorLayout(hints.FD(f), "layers.0.w", 4096, 8192); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := c.LayerStart(hints.Path(data), 7); err != nil {
		t.Fatal(err)
	}
	c.Close()

	good, _ := hints.AppendLayerStart(nil, data, 1)
	bad := slices.Clone(good)
	binary.LittleEndian.PutUint32(bad, 0xdeadbeef)
	sendRaw(t, sock, bad, 0)                                 // malformed: magic
	sendRaw(t, sock, good[:10], 0)                           // truncated header
	sendRaw(t, sock, good[:len(good)-2], 0)                  // truncated payload
	sendRaw(t, sock, make([]byte, hints.MaxDatagram+100), 0) // oversized
	sendRaw(t, sock, good, 12345)                            // foreign uid
	unread, _ := hints.AppendLayerStart(nil, secret, 1)
	sendRaw(t, sock, unread, nobody) // allowed uid, unreadable file
	missing, _ := hints.AppendLayerStart(nil, filepath.Join(dir, "nope"), 1)
	sendRaw(t, sock, missing, 0) // file does not exist
	readable, _ := hints.AppendLayerStart(nil, data, 9)
	sendRaw(t, sock, readable, nobody) // allowed uid, world-readable file: accepted

	time.Sleep(200 * time.Millisecond)
	cancel()
	rr := <-res
	if rr.err != nil {
		t.Fatal(rr.err)
	}
	r := rr.r

	want := HintRejects{Malformed: 1, Truncated: 2, Oversized: 1, ForeignUID: 1, Unreadable: 1, BadFile: 1}
	if r.sum.HintRejects != want {
		t.Errorf("rejects %+v, want %+v", r.sum.HintRejects, want)
	}
	if r.man.Counters.RejectedHints != want.Total() {
		t.Errorf("manifest rejected_hints %d, want %d", r.man.Counters.RejectedHints, want.Total())
	}
	if len(r.hints) != 4 || r.man.Counters.Hints != 4 {
		t.Fatalf("got %d hints (manifest %d), want 4: %+v", len(r.hints), r.man.Counters.Hints, r.hints)
	}
	id := r.fileID(t, data)
	h := r.hints
	for i, x := range h {
		if x.FileID != id {
			t.Errorf("hint %d file id %d, want %d (%s)", i, x.FileID, id, data)
		}
		if x.PID != uint32(os.Getpid()) {
			t.Errorf("hint %d pid %d, want %d", i, x.PID, os.Getpid())
		}
		if x.TS < r.man.Start.MonotonicNS || x.TS > r.man.End.MonotonicNS {
			t.Errorf("hint %d ts %d outside [%d, %d]", i, x.TS, r.man.Start.MonotonicNS, r.man.End.MonotonicNS)
		}
		if i > 0 && x.TS < h[i-1].TS {
			t.Errorf("hint %d ts goes backwards", i)
		}
	}
	if h[0].Kind != formats.HintTreeChildEnter || h[0].ParentPage != 3 || h[0].Position != 1 || !slices.Equal(h[0].Children, []uint64{10, 11, 12}) {
		t.Errorf("tree_child_enter row %+v", h[0])
	}
	if h[1].Kind != formats.HintTensorLayout || h[1].Name != "layers.0.w" || h[1].OffsetBytes != 4096 || h[1].LengthBytes != 8192 {
		t.Errorf("tensor_layout row %+v", h[1])
	}
	if h[2].Kind != formats.HintLayerStart || h[2].Position != 7 {
		t.Errorf("layer_start row %+v", h[2])
	}
	if h[3].Kind != formats.HintLayerStart || h[3].Position != 9 {
		t.Errorf("layer_start from uid %d row %+v", nobody, h[3])
	}
}
