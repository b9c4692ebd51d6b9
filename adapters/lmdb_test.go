package adapters

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// lmdbWalk is a test-side reader of an LMDB data file, independent of the
// adapter: it replays what a cursor range scan touches.
type lmdbWalk struct {
	data  []byte
	psize uint64
	root  uint64
	seen  map[uint64]bool
	touch []uint64 // pages in the order first touched
	tree  []uint64 // the branch and leaf pages among them
}

type lmdbTestNode struct {
	key   []byte
	child uint64 // branch nodes
	big   uint64 // leaf nodes with F_BIGDATA: first overflow page
	size  uint64 // leaf data size
}

func newLMDBWalk(t *testing.T, path string) *lmdbWalk {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	w := &lmdbWalk{data: data, psize: uint64(le.Uint32(data[40:])), seen: map[uint64]bool{}}
	// The current meta page is the one with the larger txnid.
	best := uint64(0)
	for m := uint64(0); m < 2; m++ {
		pg := data[m*w.psize:]
		if txn := le.Uint64(pg[144:]); m == 0 || txn > best {
			best, w.root = txn, le.Uint64(pg[128:])
		}
	}
	return w
}

func (w *lmdbWalk) nodes(p uint64) (branch bool, ns []lmdbTestNode) {
	le := binary.LittleEndian
	pg := w.data[p*w.psize : (p+1)*w.psize]
	branch = le.Uint16(pg[10:])&1 != 0
	if le.Uint16(pg[10:])&3 == 0 {
		return false, nil // overflow or meta
	}
	lower := int(le.Uint16(pg[12:]))
	for i := 0; 16+2*i < lower; i++ {
		off := int(le.Uint16(pg[16+2*i:]))
		lo, hi, fl, ks := uint64(le.Uint16(pg[off:])), uint64(le.Uint16(pg[off+2:])), le.Uint16(pg[off+4:]), int(le.Uint16(pg[off+6:]))
		n := lmdbTestNode{key: pg[off+8 : off+8+ks]}
		if branch {
			n.child = lo | hi<<16 | uint64(fl)<<32
		} else {
			n.size = lo | hi<<16
			if fl&1 != 0 {
				n.big = le.Uint64(pg[off+8+ks:])
			}
		}
		ns = append(ns, n)
	}
	return branch, ns
}

func (w *lmdbWalk) visitNode(p uint64) {
	if !w.seen[p] {
		w.tree = append(w.tree, p)
	}
	w.visit(p)
}

func (w *lmdbWalk) visit(p uint64) {
	if !w.seen[p] {
		w.seen[p] = true
		w.touch = append(w.touch, p)
	}
}

// scan touches what mdb_cursor_get(MDB_SET_RANGE) from start and n-1
// MDB_NEXT touch, reading every value.
func (w *lmdbWalk) scan(start []byte, n int) {
	type frame struct {
		page uint64
		idx  int
	}
	var stack []frame
	p := w.root
	for {
		w.visitNode(p)
		branch, ns := w.nodes(p)
		if !branch {
			i := 0
			for i < len(ns) && bytes.Compare(ns[i].key, start) < 0 {
				i++
			}
			stack = append(stack, frame{p, i})
			break
		}
		i := 0
		for j := 1; j < len(ns); j++ { // node 0's key is the lowest bound
			if bytes.Compare(ns[j].key, start) <= 0 {
				i = j
			}
		}
		stack = append(stack, frame{p, i})
		p = ns[i].child
	}
	for got := 0; got < n && len(stack) > 0; {
		top := &stack[len(stack)-1]
		_, ns := w.nodes(top.page)
		if top.idx >= len(ns) { // next leaf: up to a parent with more children, down its leftmost path
			stack = stack[:len(stack)-1]
			for len(stack) > 0 {
				par := &stack[len(stack)-1]
				_, pns := w.nodes(par.page)
				if par.idx+1 < len(pns) {
					par.idx++
					c := pns[par.idx].child
					for {
						w.visitNode(c)
						br, cns := w.nodes(c)
						stack = append(stack, frame{c, 0})
						if !br {
							break
						}
						c = cns[0].child
					}
					break
				}
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if nd := ns[top.idx]; nd.big != 0 {
			for k := uint64(0); k < (15+nd.size)/w.psize+1; k++ {
				w.visit(nd.big + k)
			}
		}
		top.idx++
		got++
	}
}

// readPages reads a .pages file: its comment names the scan's start key
// and count.
func readPages(t *testing.T, name string) (start string, n int, pages []uint64) {
	t.Helper()
	raw, err := os.ReadFile(testdata + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(string(raw), "# lmdb-scan -nordahead ENV %s %d:", &start, &n); err != nil {
		t.Fatalf("%s: comment: %v", name, err)
	}
	for _, f := range readFields(t, name) {
		p, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
	}
	return start, n, pages
}

// TestLMDBWalkMatchesReader checks the test's walker against the real
// reader: the pages a cold lmdb-scan -nordahead left in the page cache are
// the pages the walker touches, plus a prefix of the file: MDB_NORDAHEAD
// disables readahead on the map, but mdb_env_open reads the meta pages
// with pread, and the kernel reads ahead of that.
func TestLMDBWalkMatchesReader(t *testing.T) {
	for _, env := range []string{"small", "big"} {
		path := gunzip(t, "lmdb/"+env+".mdb.gz", "data.mdb")
		start, n, resident := readPages(t, "lmdb/"+env+".pages")
		w := newLMDBWalk(t, path)
		w.scan([]byte(start), n)
		var extra, missing []uint64
		for _, p := range resident {
			if !w.seen[p] && p >= 32 {
				extra = append(extra, p)
			}
		}
		for _, p := range w.touch {
			if !slices.Contains(resident, p) {
				missing = append(missing, p)
			}
		}
		if len(extra)+len(missing) > 0 || len(w.touch) < n/4 {
			t.Errorf("%s: walker touches %d pages, the reader left %d cached; only cached (beyond page 32) %v, only walked %v",
				env, len(w.touch), len(resident), extra, missing)
		}
	}
}

// TestLMDBLists checks the adapter's traversal lists against the walker's
// view of every branch and leaf page the scan touches.
func TestLMDBLists(t *testing.T) {
	path := gunzip(t, "lmdb/big.mdb.gz", "data.mdb")
	w := newLMDBWalk(t, path)
	start, n, _ := readPages(t, "lmdb/big.pages")
	w.scan([]byte(start), n)
	p, err := newLMDB(w.data[:4096], uint64(len(w.data)), &Config{Ahead: 16, PageSize: 4096, Confirm: 2})
	if err != nil {
		t.Fatal(err)
	}
	f := p.(*lmdbFile)
	var st Stats
	overflow := 0
	for _, pg := range w.tree {
		branch, ns := w.nodes(pg)
		kids, ok := f.nodes(w.data[pg*w.psize:(pg+1)*w.psize], uint32(pg), &st)
		var want, got []uint32
		for _, nd := range ns {
			switch {
			case branch:
				want = append(want, uint32(nd.child))
			case nd.big != 0:
				want = append(want, uint32(nd.big))
			}
		}
		for _, k := range kids {
			got = append(got, k.page)
			if k.kind == kindOverflow {
				overflow++
				if k.span != 3 {
					t.Errorf("page %d: overflow run of %d pages; 9000-byte values take 3", pg, k.span)
				}
			}
		}
		if (len(ns) > 0 && !ok) || !slices.Equal(got, want) {
			t.Errorf("page %d (branch %v): list %v, want %v", pg, branch, got, want)
		}
	}
	if overflow == 0 || st.Malformed != 0 {
		t.Errorf("%d overflow runs listed, %d malformed", overflow, st.Malformed)
	}
}

// lmdbScanEvents returns the page touches of a walk as the recorder sees
// them without fault-around: one fault per first touch.
func lmdbScanEvents(touch []uint64) []policies.Event {
	evs := make([]policies.Event, len(touch))
	for i, p := range touch {
		evs[i] = accessOf(span{p * 4096, 4096}, formats.KindFault, uint64(i+1))
	}
	return evs
}

// TestLMDBScan runs the adapter on the faults of range scans and checks
// what it predicted, as TestSQLiteScans does.
func TestLMDBScan(t *testing.T) {
	for _, c := range []struct {
		env       string
		minInTime float64
	}{
		{"small", 0.9},
		{"big", 0.6},
	} {
		t.Run(c.env, func(t *testing.T) {
			path := gunzip(t, "lmdb/"+c.env+".mdb.gz", "data.mdb")
			w := newLMDBWalk(t, path)
			start, n, _ := readPages(t, "lmdb/"+c.env+".pages")
			w.scan([]byte(start), n)
			evs := append(lmdbScanEvents([]uint64{0, 1}), lmdbScanEvents(w.touch)...)
			out, s := run(t, Config{}, path, evs)
			golden(t, "lmdb/"+c.env+".golden", out)
			r := analyse(evs, out)
			inTime := float64(r.inTime) / float64(r.distinct)
			t.Logf("%d faults, %.3f predicted in time, %d predicted never read, %d events, stats %+v", len(evs), inTime, r.never, len(out), s.Stats())
			if inTime < c.minInTime {
				t.Errorf("%.3f of the pages touched were predicted in time, want at least %.2f", inTime, c.minInTime)
			}
			// The meta pages, the descent, and Confirm+1 entries of the
			// first leaf (3-page runs in the big environment).
			if r.firstInTime < 0 || r.firstInTime > 16 {
				t.Errorf("first page predicted in time at fault %d, want within the first 16", r.firstInTime)
			}
			// Every miss after that is the first entry of the page just
			// touched (a leaf's first overflow run, a branch's first
			// child), a later page of a run just touched, or one of the
			// first Confirm+1 entries of a node.
			kidsOf := map[uint64][]uint64{}
			parent := map[uint64]uint64{}
			for _, pg := range w.tree {
				br, ns := w.nodes(pg)
				for _, nd := range ns {
					switch {
					case br:
						kidsOf[pg] = append(kidsOf[pg], nd.child)
						parent[nd.child] = pg
					case nd.big != 0:
						kidsOf[pg] = append(kidsOf[pg], nd.big)
						for k := uint64(0); k < (15+nd.size)/4096+1; k++ {
							parent[nd.big+k] = pg
						}
					}
				}
			}
			entered := map[uint64]map[uint64]bool{}
			missed := map[int]bool{}
			for _, i := range r.missed {
				missed[i] = true
			}
			for i, e := range evs {
				p := e.Access.Page
				par, listed := parent[p]
				if listed {
					if entered[par] == nil {
						entered[par] = map[uint64]bool{}
					}
					entered[par][p] = true
				}
				if !missed[i] || i < r.firstInTime {
					continue
				}
				prev := evs[i-1].Access.Page
				l := kidsOf[prev]
				switch {
				case len(l) > 0 && l[0] == p:
				case listed && parent[prev] == par && prev+1 == p: // inside a run
				case listed && len(entered[par]) <= DefaultConfirm+1:
				default:
					t.Errorf("fault %d on page %d was not predicted and is not the first entry of page %d touched before it", i, p, prev)
				}
			}
			// Never-touched predictions are the windows ahead of the
			// scan's end: Ahead entries a level, a run at most 3 pages.
			if r.never > 3*DefaultAhead*3 {
				t.Errorf("%d pages predicted but never touched", r.never)
			}
		})
	}
}

// TestLMDBFaultAround replays a scan as the kernel reports it with
// fault-around: a touch of a page not yet mapped maps the cached pages of
// its 16-page window (a map row) and faults if the page is not cached; a
// touch of a mapped page reports nothing. Pages the adapter predicted are
// cached, as a prefetcher would make them. The adapter must keep up
// although most touches of predicted pages are hidden.
func TestLMDBFaultAround(t *testing.T) {
	path := gunzip(t, "lmdb/small.mdb.gz", "data.mdb")
	w := newLMDBWalk(t, path)
	start, n, _ := readPages(t, "lmdb/small.pages")
	w.scan([]byte(start), n)
	s, err := NewStage(Config{}, PathFiles{Path: func(uint32) (string, bool) { return path, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cached, mapped := map[uint64]bool{}, map[uint64]bool{}
	predictedAt := map[uint64]int{}
	inTime, total, events := 0, 0, 0
	for i, p := range append([]uint64{0, 1}, w.touch...) {
		total++
		if cached[p] {
			inTime++
		}
		if mapped[p] {
			continue
		}
		win := p &^ 15
		var evs []policies.Event
		hasCached := false
		for q := win; q < win+16; q++ {
			if cached[q] {
				hasCached = true
			}
		}
		if hasCached {
			evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: uint64(i), File: 1, PID: 7,
				Access: policies.FileAccess{Kind: formats.KindMap, Page: win, NPages: 16}})
			for q := win; q < win+16; q++ {
				if cached[q] {
					mapped[q] = true
				}
			}
		}
		if !cached[p] {
			evs = append(evs, accessOf(span{p * 4096, 4096}, formats.KindFault, uint64(i)))
			cached[p], mapped[p] = true, true
		}
		for k := range evs {
			events++
			s.Process(&evs[k], func(ev *policies.Event, _ string) {
				for _, c := range ev.Tree.Children {
					if !cached[c] {
						cached[c] = true
						predictedAt[c] = i
					}
				}
			})
		}
	}
	frac := float64(inTime) / float64(total)
	t.Logf("%d touches, %d events reported, %.3f found cached by a prediction", total, events, frac)
	if frac < 0.85 {
		t.Errorf("%.3f of the touches hit predicted pages, want at least 0.85", frac)
	}
}

// TestLMDBMalformed checks the page validation.
func TestLMDBMalformed(t *testing.T) {
	f := &lmdbFile{psize: 4096, pages: 100}
	f.t.init(1, &Config{Ahead: 16, PageSize: 4096, Confirm: 2}, 0, 4096, true)
	le := binary.LittleEndian
	pg := make([]byte, 4096)
	le.PutUint64(pg, 9)
	le.PutUint16(pg[10:], lmdbBranch)
	node := func(off int, child uint64) {
		le.PutUint16(pg[off:], uint16(child))
		le.PutUint16(pg[off+2:], uint16(child>>16))
		le.PutUint16(pg[off+4:], uint16(child>>32))
	}
	// Five nodes: children 5, 9 (itself), 500 (past the file), 1 (a meta
	// page), and a pointer outside the node area.
	offs := []int{4000, 3990, 3980, 3970, 8}
	for i, c := range []uint64{5, 9, 500, 1} {
		node(offs[i], c)
	}
	for i, o := range offs {
		le.PutUint16(pg[16+2*i:], uint16(o))
	}
	le.PutUint16(pg[12:], uint16(16+2*len(offs)))
	le.PutUint16(pg[14:], 3970)
	var st Stats
	kids, ok := f.nodes(pg, 9, &st)
	if !ok || len(kids) != 1 || kids[0].page != 5 || st.Malformed != 4 {
		t.Errorf("kids %v ok %v malformed %d; want only child 5 and 4 rejected", kids, ok, st.Malformed)
	}
	if _, ok := f.nodes(pg, 8, &st); ok {
		t.Error("a page whose header names another page number was parsed")
	}
	le.PutUint16(pg[14:], 10) // upper below lower
	if _, ok := f.nodes(pg, 9, &st); ok {
		t.Error("a page with upper < lower was parsed")
	}
	if _, ok, err := parseLMDBMeta(make([]byte, 200)); ok || err != nil {
		t.Errorf("zero page recognized: %v %v", ok, err)
	}
	m := make([]byte, 200)
	le.PutUint16(m[10:], lmdbMeta)
	le.PutUint32(m[16:], lmdbMagic)
	le.PutUint32(m[20:], 2)
	if _, ok, err := parseLMDBMeta(m); !ok || err == nil {
		t.Error("data version 2 was accepted")
	}
	le.PutUint32(m[20:], 1)
	le.PutUint32(m[40:], 3000)
	if _, ok, err := parseLMDBMeta(m); !ok || err == nil {
		t.Error("page size 3000 was accepted")
	}
}

// TestLMDBWalk runs the adapter on the faults of the test environments'
// scans with a simulated page cache that holds what the program touched
// and what was predicted at least lag faults before (a prefetcher that
// keeps up). Without a walk a node's list is predicted only when the
// program touches the node: a leaf's overflow runs (the big environment's
// 9000-byte values) and a branch's first leaves come too late. With
// Config.ReadCached the walk parses the cached pages ahead of the scan, so
// more pages are cached in time. It reads nothing uncached, and what it
// predicts beyond the scan's end stays bounded.
func TestLMDBWalk(t *testing.T) {
	for _, env := range []string{"small", "big"} {
		path := gunzip(t, "lmdb/"+env+".mdb.gz", "data.mdb")
		w := newLMDBWalk(t, path)
		start, n, _ := readPages(t, "lmdb/"+env+".pages")
		w.scan([]byte(start), n)
		evs := append(lmdbScanEvents([]uint64{0, 1}), lmdbScanEvents(w.touch)...)
		const ps, lag = 4096, 8
		share := map[bool]float64{}
		for _, readCached := range []bool{false, true} {
			r := runCached(t, path, ps, readCached, lag, evs)
			share[readCached] = r.share()
			t.Logf("%s, ReadCached %v: %d faults on %d pages, %.3f cached in time, %d predicted never read; stats %+v", env, readCached, len(evs), r.distinct, share[readCached], r.never, r.st)
			if r.st.PagesIO > 0 || readCached != (r.st.PagesCached > 0) {
				t.Errorf("%s, ReadCached %v: the adapter read what the program had not: stats %+v", env, readCached, r.st)
			}
			// Overflow runs are up to 3 pages here: a bound in entries
			// (DefaultAhead, walkOverread) is 3 times that in pages.
			bound := 3 * DefaultAhead * 3
			if readCached {
				bound = 3 * walkOverread
			}
			if r.never > bound {
				t.Errorf("%s, ReadCached %v: %d pages predicted never read, want at most %d", env, readCached, r.never, bound)
			}
		}
		// What no walk helps: the meta pages, the descent, the entries
		// that establish the scan and the lag's first faults after it
		// (14 of the small scan's 217 pages).
		if share[true] < 0.93 || share[true] < share[false]+0.04 {
			t.Errorf("%s: %.3f of the pages cached in time with the walk, %.3f without: want at least 0.93 and 0.04 more", env, share[true], share[false])
		}
	}
}
