package hints

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// File names the file a hint is about: by path, or by an open descriptor
// that travels with the hint (SCM_RIGHTS), which also proves the sender can
// read it.
type File struct {
	path string
	fd   int
}

// Path names a file by path. Relative paths are resolved by the recorder
// against its own working directory, so prefer absolute paths.
func Path(p string) File { return File{path: p, fd: -1} }

// FD names a file by an open descriptor, sent with the hint.
func FD(f *os.File) File { return File{fd: int(f.Fd())} }

// Client sends hints to a recorder. Its methods are safe for concurrent use.
// A send blocks while the recorder's socket queue is full.
type Client struct {
	mu  sync.Mutex
	fd  int
	buf []byte
	oob []byte
}

// Dial connects to the recorder's hint socket at path.
func Dial(path string) (*Client, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dial hints %s: socket: %w", path, err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("dial hints %s: %w (is predictio record --hints unix:%s running?)", path, err, path)
	}
	return &Client{fd: fd, buf: make([]byte, 0, 512)}, nil
}

// ErrClosed is returned by a Client used after Close.
var ErrClosed = errors.New("hints client closed")

func (c *Client) send(f File) error {
	if c.fd < 0 {
		return ErrClosed
	}
	if f.path != "" {
		_, err := unix.Write(c.fd, c.buf)
		for err == unix.EINTR {
			_, err = unix.Write(c.fd, c.buf)
		}
		if err != nil {
			return fmt.Errorf("send hint: %w", err)
		}
		return nil
	}
	if f.fd < 0 {
		return fmt.Errorf("send hint: no file given: %w", ErrMalformed)
	}
	c.oob = unix.UnixRights(f.fd)
	err := unix.Sendmsg(c.fd, c.buf, c.oob, nil, 0)
	for err == unix.EINTR {
		err = unix.Sendmsg(c.fd, c.buf, c.oob, nil, 0)
	}
	if err != nil {
		return fmt.Errorf("send hint: %w", err)
	}
	return nil
}

// TreeChildEnter says a tree traversal is entering child number position
// (0 = first) of the node stored at page parentPage of file. children are
// the upcoming child pages: the parent's children after position, in the
// order the traversal will enter them, without the child being entered
// (kids[position+1:] of the parent's child list).
func (c *Client) TreeChildEnter(file File, parentPage uint64, position uint32, children []uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.buf, err = AppendTreeChildEnter(c.buf[:0], file.path, parentPage, position, children); err != nil {
		return err
	}
	return c.send(file)
}

// TensorLayout says tensor name occupies length bytes at offset of file.
func (c *Client) TensorLayout(file File, name string, offset, length uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.buf, err = AppendTensorLayout(c.buf[:0], file.path, name, offset, length); err != nil {
		return err
	}
	return c.send(file)
}

// LayerStart says the program is starting layer number layer, whose weights
// are in file.
func (c *Client) LayerStart(file File, layer uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.buf, err = AppendLayerStart(c.buf[:0], file.path, layer); err != nil {
		return err
	}
	return c.send(file)
}

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}
