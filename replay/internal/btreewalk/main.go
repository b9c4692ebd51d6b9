// Command btreewalk builds a B-tree-like file with scattered child pages and
// scans it in key order, sending tree_child_enter hints through the hints
// package, so that replay can be measured on a recorded B-tree scan.
//
//	go run ./replay/internal/btreewalk build -o /var/tmp/bt/tree.db
//	predictio record --hints unix:/run/predictio.sock -o bt.bundle -- \
//	    go run ./replay/internal/btreewalk scan --hints /run/predictio.sock /var/tmp/bt/tree.db
//
// File layout: page 0 is the root. Every node is one 4 KiB page: a header
// (magic "BTRW", level, child count) then the children's page numbers
// (little endian uint64). Leaves (level 0) hold key data. Internal nodes
// and leaves are placed at random pages of a file several times larger than
// the tree, so that sibling pages are not adjacent and kernel readahead
// cannot guess them.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/hints"
)

const pageSize = 4096

var magic = [4]byte{'B', 'T', 'R', 'W'}

func init() {
	// One OS thread for the whole walk, so the recording has one thread
	// (tid) and replay keeps the walk's order.
	runtime.LockOSThread()
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "scan":
		err = scan(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "btreewalk: %v\n", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: btreewalk build -o FILE [--fanout N] [--depth N] [--spread N] [--seed N]\n       btreewalk scan [--hints SOCKET] [--think DUR] [--leaves N] FILE")
	os.Exit(2)
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	out := fs.String("o", "", "output file")
	fanout := fs.Int("fanout", 64, "children per internal node")
	depth := fs.Int("depth", 3, "levels, root included (3: root, one internal level, leaves)")
	spread := fs.Int("spread", 4, "file pages per tree node: the nodes are scattered over spread times the tree size")
	seed := fs.Int64("seed", 1, "placement seed")
	fs.Parse(args)
	if *out == "" || *fanout < 2 || *fanout > (pageSize-16)/8 || *depth < 2 || *spread < 1 {
		return errors.New("build: need -o FILE, 2 <= --fanout <= 510, --depth >= 2, --spread >= 1")
	}
	nodes := 0
	width := 1
	for l := 0; l < *depth; l++ {
		nodes += width
		width *= *fanout
	}
	total := nodes * *spread
	rng := rand.New(rand.NewSource(*seed))
	// Page 0 is the root; the other nodes take random distinct pages.
	perm := rng.Perm(total - 1)
	next := 0
	alloc := func() uint64 { p := uint64(perm[next] + 1); next++; return p }
	img := make([]byte, total*pageSize)
	// Filler pages hold noise, so the file is not sparse.
	for i := range img {
		img[i] = byte(rng.Intn(256))
	}
	var fill func(page uint64, level int)
	fill = func(page uint64, level int) {
		b := img[page*pageSize : (page+1)*pageSize]
		copy(b, magic[:])
		binary.LittleEndian.PutUint32(b[4:], uint32(level))
		if level == 0 {
			binary.LittleEndian.PutUint32(b[8:], 0)
			return
		}
		binary.LittleEndian.PutUint32(b[8:], uint32(*fanout))
		kids := make([]uint64, *fanout)
		for i := range kids {
			kids[i] = alloc()
			binary.LittleEndian.PutUint64(b[16+8*i:], kids[i])
		}
		for _, k := range kids {
			fill(k, level-1)
		}
	}
	fill(0, *depth-1)
	if err := os.WriteFile(*out, img, 0o644); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	f, err := os.Open(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("build: fsync: %w", err)
	}
	fmt.Printf("%s: %d nodes (fanout %d, depth %d) scattered over %d pages (%.1f MiB)\n", *out, nodes, *fanout, *depth, total, float64(len(img))/(1<<20))
	return nil
}

type walker struct {
	f      *os.File
	hc     *hints.Client
	think  time.Duration
	leaves int
	read   int // leaves
	pages  int // nodes read
	sum    uint32
	buf    []byte
}

func scan(args []string) error {
	fs := flag.NewFlagSet("scan", flag.ExitOnError)
	sock := fs.String("hints", os.Getenv("PREDICTIO_HINTS"), "hint socket of 'predictio record --hints' (default $PREDICTIO_HINTS); empty: no hints")
	think := fs.Duration("think", 50*time.Microsecond, "work per leaf, spent computing a checksum")
	leaves := fs.Int("leaves", 0, "stop after this many leaves (0: all)")
	fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer f.Close()
	w := &walker{f: f, think: *think, leaves: *leaves, buf: make([]byte, pageSize)}
	if *sock != "" {
		if w.hc, err = hints.Dial(*sock); err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		defer w.hc.Close()
	}
	start := time.Now()
	if err := w.visit(0); err != nil && !errors.Is(err, errDone) {
		return err
	}
	fmt.Printf("scanned %d leaves (%d pages read) in %v, checksum %08x\n", w.read, w.pages, time.Since(start).Round(time.Millisecond), w.sum)
	return nil
}

var errDone = errors.New("done")

// visit reads node page and scans its subtree in key order; before entering
// child i of an internal node it sends tree_child_enter with the children
// still to come.
func (w *walker) visit(page uint64) error {
	n, err := unix.Pread(int(w.f.Fd()), w.buf, int64(page)*pageSize)
	if err != nil || n != pageSize {
		return fmt.Errorf("scan: read page %d: %v (%d bytes)", page, err, n)
	}
	if [4]byte(w.buf[:4]) != magic {
		return fmt.Errorf("scan: page %d is not a node (bad magic); build the file with 'btreewalk build'", page)
	}
	w.pages++
	level := binary.LittleEndian.Uint32(w.buf[4:])
	if level == 0 {
		w.read++
		deadline := time.Now().Add(w.think)
		for time.Now().Before(deadline) {
			w.sum = crc32.Update(w.sum, crc32.IEEETable, w.buf)
		}
		if w.leaves > 0 && w.read >= w.leaves {
			return errDone
		}
		return nil
	}
	cnt := int(binary.LittleEndian.Uint32(w.buf[8:]))
	if cnt > (pageSize-16)/8 {
		return fmt.Errorf("scan: page %d: child count %d too large", page, cnt)
	}
	kids := make([]uint64, cnt)
	for i := range kids {
		kids[i] = binary.LittleEndian.Uint64(w.buf[16+8*i:])
	}
	for i, k := range kids {
		if w.hc != nil {
			if err := w.hc.TreeChildEnter(hints.FD(w.f), page, uint32(i), kids[i+1:]); err != nil {
				return fmt.Errorf("scan: %w", err)
			}
		}
		if err := w.visit(k); err != nil {
			return err
		}
	}
	return nil
}
