package source

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/hints"
)

// TestHintServeStopsUnderLoad checks that stop ends serve while a client
// keeps sending: the receive timeout never fires then, so serve must check
// for stop between batches too, or the recording never finishes.
func TestHintServeStopsUnderLoad(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hints.sock")
	s, err := newHintServer(sock, testSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	served := make(chan struct{})
	go func() { s.serve(); close(served) }()

	var quit atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		to := &unix.SockaddrUnix{Name: sock}
		for !quit.Load() {
			_ = unix.Sendto(fd, []byte("not a hint"), unix.MSG_DONTWAIT, to)
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { quit.Store(true); wg.Wait() }()

	time.Sleep(200 * time.Millisecond)
	s.stop()
	select {
	case <-served:
	case <-time.After(2 * time.Second):
		quit.Store(true)
		<-served
		t.Fatal("serve kept running for 2s after stop while a client was sending")
	}
	if s.rejects().Total() == 0 {
		t.Fatal("no datagram was rejected; the sender never reached the server")
	}
}

// TestHintPathCheckPerSender checks that a cached "readable" verdict for one
// sender is not reused for another sender with the same uid but a gid that
// may not read the file.
func TestHintPathCheckPerSender(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_CHOWN) to give the test file another group")
	}
	dir := openDir(t)
	f := filepath.Join(dir, "group-only")
	if err := os.WriteFile(f, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	const uid, gid, other = 4242, 4343, 4444
	if err := os.Chown(f, 0, gid); err != nil {
		t.Fatal(err)
	}
	s, err := newHintServer(filepath.Join(dir, "hints.sock"), testSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	pid := int32(os.Getpid())
	if _, rej := s.checkPath(&unix.Ucred{Pid: pid, Uid: uid, Gid: gid}, []byte(f)); rej >= 0 {
		t.Fatalf("uid %d gid %d: rejected (%d), want readable", uid, gid, rej)
	}
	if _, rej := s.checkPath(&unix.Ucred{Pid: pid, Uid: uid, Gid: other}, []byte(f)); rej != rejUnreadable {
		t.Fatalf("uid %d gid %d: got %d, want rejUnreadable (%d)", uid, other, rej, rejUnreadable)
	}
}

// openDir returns a new directory that every user can search, under
// /var/tmp (t.TempDir's parents are private to root).
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "predictio-hint-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestHintPathCheckKernel checks that a hint's path is checked the way the
// kernel would check an open by the sender: a world-readable file in a
// directory the sender cannot search is unreadable, and a file its mode
// bits close to the sender but an ACL opens is readable.
func TestHintPathCheckKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SETUID, CAP_SETGID) to check paths as another user")
	}
	dir := openDir(t)
	closed := filepath.Join(dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(closed, "world-readable")
	open := filepath.Join(dir, "world-readable")
	acl := filepath.Join(dir, "acl-only")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{hidden, 0o644}, {open, 0o644}, {acl, 0o600}} {
		if err := os.WriteFile(f.path, []byte("x"), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f.path, f.mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	const uid, gid, other = 4242, 4343, 4244
	aclOK := setReadACL(acl, uid) == nil

	s, err := newHintServer(filepath.Join(dir, "hints.sock"), testSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if s.access == nil {
		if errors.Is(s.accessErr, unix.ENOSYS) {
			t.Skipf("kernel lacks faccessat2 (Linux 5.8): %v", s.accessErr)
		}
		t.Fatalf("no kernel access check as root: %v", s.accessErr)
	}
	pid := int32(os.Getpid())
	for _, tc := range []struct {
		path     string
		uid      uint32
		readable bool
		skip     bool
	}{
		{hidden, uid, false, false}, // mode bits would say readable
		{open, uid, true, false},
		{acl, uid, true, !aclOK}, // mode bits would say unreadable
		{acl, other, false, !aclOK},
	} {
		if tc.skip {
			t.Logf("%s: no POSIX ACLs on this filesystem; not checked", tc.path)
			continue
		}
		_, rej := s.checkPath(&unix.Ucred{Pid: pid, Uid: tc.uid, Gid: gid}, []byte(tc.path))
		if got := rej < 0; got != tc.readable {
			t.Errorf("uid %d, %s: readable %v (reject %d), want %v", tc.uid, tc.path, got, rej, tc.readable)
		}
	}
	// The checker thread's credentials never leak into the process.
	if b, err := os.ReadFile(hidden); err != nil || string(b) != "x" {
		t.Errorf("root reading %s after the checks: %q, %v", hidden, b, err)
	}
}

// setReadACL gives uid read access to path with a POSIX access ACL
// (system.posix_acl_access, version 2), leaving the mode's owner bits.
func setReadACL(path string, uid uint32) error {
	const (
		userObj  = 0x01
		user     = 0x02
		groupObj = 0x04
		mask     = 0x10
		other    = 0x20
		undef    = 0xffffffff
	)
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{userObj, 6, undef}, {user, 4, uid}, {groupObj, 0, undef}, {mask, 4, undef}, {other, 0, undef}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return unix.Setxattr(path, "system.posix_acl_access", b, 0)
}

// testSource is a Source with only a file table and a consumer that drops
// what it gets, for the hint server alone.
func testSource() *Source {
	s := &Source{files: newFileTable(filter{}, nil, ""), failed: make(chan struct{})}
	s.consumer = ConsumerFunc(func(*Batch) error { return nil })
	return s
}

// TestHintDropReports checks that the server adds up the senders' drop
// reports (docs/hints.md, drop_report) from allowed senders, keeps them out
// of the hint and reject counts, and rejects reports from a foreign uid or
// with a descriptor attached.
func TestHintDropReports(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to forge another uid in SCM_CREDENTIALS")
	}
	sock := filepath.Join(t.TempDir(), "hints.sock")
	s, err := newHintServer(sock, testSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	served := make(chan struct{})
	go func() { s.serve(); close(served) }()

	send := func(b []byte, uid uint32, withFD bool) {
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
		if withFD {
			oob = append(oob, unix.UnixRights(0)...)
		}
		if err := unix.Sendmsg(fd, b, oob, &unix.SockaddrUnix{Name: sock}, 0); err != nil {
			t.Fatal(err)
		}
	}
	send(hints.AppendDropReport(nil, 5, 2), 0, false)
	send(hints.AppendDropReport(nil, 10, 0), 0, false)
	send(hints.AppendDropReport(nil, 1000, 1000), 12345, false) // foreign uid
	send(hints.AppendDropReport(nil, 1000, 1000), 0, true)      // with a descriptor
	fdFlag := hints.AppendDropReport(nil, 1000, 1000)
	fdFlag[6] = byte(hints.FlagFD)
	send(fdFlag, 0, false)
	send(hints.AppendDropReport(nil, ^uint64(0), 0), 0, false) // saturates, does not wrap

	// The queue is FIFO: the last report counted means all were handled.
	want := HintDrops{QueueFull: ^uint64(0), NoServer: 2}
	for deadline := time.Now().Add(5 * time.Second); s.drops() != want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	s.stop()
	<-served
	if got := s.drops(); got != want {
		t.Errorf("drops %+v, want %+v", got, want)
	}
	if got, want := s.rejects(), (HintRejects{ForeignUID: 1, BadFile: 1, Malformed: 1}); got != want {
		t.Errorf("rejects %+v, want %+v", got, want)
	}
	if n := s.accepted.Load(); n != 0 {
		t.Errorf("%d reports counted as hints", n)
	}
}

// TestHintPathCacheBounded checks that the path-check cache stays within
// maxPathChecks entries over all senders, however many paths they name.
func TestHintPathCacheBounded(t *testing.T) {
	s, err := newHintServer(filepath.Join(t.TempDir(), "hints.sock"), testSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for i := range maxPathChecks + 1000 {
		cred := &unix.Ucred{Pid: int32(i % 7), Uid: 0, Gid: 0}
		if _, rej := s.checkPath(cred, []byte("/nonexistent/predictio/"+strconv.Itoa(i))); rej != rejBadFile {
			t.Fatalf("missing path %d: %d, want rejBadFile", i, rej)
		}
	}
	n := 0
	for _, byPath := range s.paths {
		n += len(byPath)
	}
	if n != s.npaths || n > maxPathChecks || n == 0 {
		t.Errorf("cache holds %d entries (counted %d), want 1..%d", n, s.npaths, maxPathChecks)
	}
}

// TestHintServeDrainsAtStop queues drop reports before serve runs, stops
// the server, and checks that serve still counts every one of them: what
// was sent before a recording stopped is in it.
func TestHintServeDrainsAtStop(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hints.sock")
	s, err := newHintServer(sock, testSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	queued := uint64(0)
	for range hintQueue {
		if unix.Sendto(fd, hints.AppendDropReport(nil, 1, 0), unix.MSG_DONTWAIT, &unix.SockaddrUnix{Name: sock}) != nil {
			break
		}
		queued++
	}
	if queued <= hintBatch {
		t.Skipf("the socket queues only %d datagrams (net.unix.max_dgram_qlen; raising it needs root)", queued)
	}
	s.stop()
	done := make(chan struct{})
	go func() { s.serve(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return after stop")
	}
	if got := s.drops().QueueFull; got != queued {
		t.Errorf("serve counted %d of the %d drop reports queued before stop", got, queued)
	}
}
