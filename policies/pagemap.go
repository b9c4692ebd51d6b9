package policies

// pageMap is a sparse per-page byte map, allocated in chunks of 4096 pages
// so that memory grows with the distinct pages touched. Chunks of the
// first 2^30 pages are found through a directory slice, beyond through a
// map.
type pageMap struct {
	dense  []*[pageChunk]uint8
	sparse map[uint64]*[pageChunk]uint8
	last   uint64
	lastC  *[pageChunk]uint8
}

const (
	pageChunkShift = 12
	pageChunk      = 1 << pageChunkShift
	denseChunks    = 1 << 18 // directory of at most 2 MiB: pages below 2^30
)

func (m *pageMap) chunk(page uint64, create bool) *[pageChunk]uint8 {
	k := page >> pageChunkShift
	if m.lastC != nil && m.last == k {
		return m.lastC
	}
	return m.chunkSlow(k, create)
}

func (m *pageMap) chunkSlow(k uint64, create bool) *[pageChunk]uint8 {
	var c *[pageChunk]uint8
	switch {
	case k < uint64(len(m.dense)):
		c = m.dense[k]
		if c == nil && create {
			c = new([pageChunk]uint8)
			m.dense[k] = c
		}
	case k < denseChunks:
		if !create {
			return nil
		}
		n := min(max(2*len(m.dense), int(k)+1, 16), denseChunks)
		m.dense = append(m.dense, make([]*[pageChunk]uint8, n-len(m.dense))...)
		c = new([pageChunk]uint8)
		m.dense[k] = c
	default:
		c = m.sparse[k]
		if c == nil && create {
			if m.sparse == nil {
				m.sparse = make(map[uint64]*[pageChunk]uint8)
			}
			c = new([pageChunk]uint8)
			m.sparse[k] = c
		}
	}
	if c != nil {
		m.last, m.lastC = k, c
	}
	return c
}

// peek returns the chunk holding page, or nil, without remembering it.
func (m *pageMap) peek(page uint64) *[pageChunk]uint8 {
	switch k := page >> pageChunkShift; {
	case k < uint64(len(m.dense)):
		return m.dense[k]
	case k < denseChunks:
		return nil
	default:
		return m.sparse[k]
	}
}

func (m *pageMap) get(page uint64) uint8 {
	if m.lastC != nil && m.last == page>>pageChunkShift {
		return m.lastC[page&(pageChunk-1)]
	}
	c := m.chunkSlow(page>>pageChunkShift, false)
	if c == nil {
		return 0
	}
	return c[page&(pageChunk-1)]
}

func (m *pageMap) set(page uint64, v uint8) {
	if m.lastC != nil && m.last == page>>pageChunkShift {
		m.lastC[page&(pageChunk-1)] = v
		return
	}
	m.chunkSlow(page>>pageChunkShift, true)[page&(pageChunk-1)] = v
}

// fill sets the n pages from page to v. The range must not cross a chunk
// boundary (an aligned folio of at most 2^pageChunkShift pages).
func (m *pageMap) fill(page, n uint64, v uint8) {
	c := m.chunk(page, true)
	off := page & (pageChunk - 1)
	s := c[off : off+n]
	for i := range s {
		s[i] = v
	}
}

// pageSet is a set of pages with the same sparse layout.
type pageSet struct{ m pageMap }

func (s *pageSet) has(page uint64) bool { return s.m.get(page) != 0 }
func (s *pageSet) add(page uint64)      { s.m.set(page, 1) }

// fileTable maps file ids to per-file state: a slice for the dense small
// ids bundles use, a map beyond.
type fileTable[T any] struct {
	dense  []*T
	sparse map[uint32]*T
}

const denseFiles = 1 << 16

// get returns the state of id, or nil.
func (t *fileTable[T]) get(id uint32) *T {
	if id < uint32(len(t.dense)) {
		return t.dense[id]
	}
	if id < denseFiles {
		return nil
	}
	return t.sparse[id]
}

// put stores v as the state of id.
func (t *fileTable[T]) put(id uint32, v *T) {
	if id < denseFiles {
		if id >= uint32(len(t.dense)) {
			n := max(2*len(t.dense), int(id)+1, 16)
			t.dense = append(t.dense, make([]*T, min(n, denseFiles)-len(t.dense))...)
		}
		t.dense[id] = v
		return
	}
	if t.sparse == nil {
		t.sparse = map[uint32]*T{}
	}
	t.sparse[id] = v
}

// reset forgets every file.
func (t *fileTable[T]) reset() {
	clear(t.dense)
	clear(t.sparse)
}
