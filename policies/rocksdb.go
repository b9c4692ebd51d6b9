package policies

import "github.com/predictio/predictio/formats"

func init() {
	register("rocksdb", &factory{
		example: "rocksdb:initial_kb=8,max_kb=256,reads=2",
		doc: "RocksDB's iterator auto-readahead (BlockPrefetcher::PrefetchIfNeeded, buffered I/O) ported onto kernel-observed reads: " +
			"after reads sequential reads of a file by one thread, prefetch the read plus a window that starts at initial_kb and doubles up to max_kb; " +
			"reads inside the last window only move the cursor, a jump resets the window",
		params: []param{
			{"initial_kb", "8", "initial_auto_readahead_size in KiB (RocksDB's default 8 KiB)"},
			{"max_kb", "256", "max_auto_readahead_size in KiB (RocksDB's default 256 KiB); 0 turns the policy off, as in RocksDB"},
			{"reads", "2", "num_file_reads_for_auto_readahead: sequential reads before readahead starts (RocksDB's default 2)"},
		},
		build: func(a *args, env Env) (Policy, error) {
			p := &rocksdbPolicy{env: env,
				initial: a.uint("initial_kb", 0, 1<<22) << 10,
				maxRA:   a.uint("max_kb", 0, 1<<22) << 10,
				reads:   int64(a.uint("reads", 0, 1<<20)),
			}
			p.norm.MaxPages = env.maxPages()
			return p, nil
		},
	})
}

// rocksdbPolicy is RocksDB's implicit auto-readahead for iterators, as
// table/block_based/block_prefetcher.cc runs it for buffered reads (where
// it calls the file system's Prefetch, readahead(2) on Linux): per
// iterator, a block read that does not continue the previous one resets
// the state (ResetValues: one read counted, window back to the initial
// size); a read inside the last prefetched range only records its
// position; otherwise the read is counted, and once more than reads
// sequential reads were seen, the block plus the window is prefetched,
// the range's end is remembered and the window doubles up to maxRA.
//
// Ported onto kernel-observed reads, a block is the page range of one read
// (RocksDB's block boundaries are bytes inside pages: a read continues the
// previous one when it starts on the previous read's last page or the page
// after it), and an iterator is a thread of the file: the policy keeps the
// state of the last streamsPerFile threads that read each file.
type rocksdbPolicy struct {
	env     Env
	initial uint64 // bytes
	maxRA   uint64 // bytes
	reads   int64
	files   fileTable[rocksdbFile]
	norm    Normalizer
	clock   uint64
}

const streamsPerFile = 4

type rocksdbFile struct {
	streams [streamsPerFile]rocksdbStream
}

// rocksdbStream is one iterator's BlockPrefetcher state, in pages.
type rocksdbStream struct {
	tid       uint32
	used      uint64 // policy clock of the last read, for replacement
	prevFirst uint64
	prevN     uint64 // 0: no previous read (IsBlockSequential is true)
	numReads  int64
	raBytes   uint64 // readahead_size_
	raLimit   uint64 // readahead_limit_ as an exclusive page bound
}

func (p *rocksdbPolicy) Accepts(k EventKind) bool { return k == EventFileAccess }

// stream returns the state of thread tid of file id, taking over the
// least recently used slot for a new thread.
func (p *rocksdbPolicy) stream(id, tid uint32) *rocksdbStream {
	f := p.files.get(id)
	if f == nil {
		f = &rocksdbFile{}
		p.files.put(id, f)
	}
	p.clock++
	victim := &f.streams[0]
	for i := range f.streams {
		s := &f.streams[i]
		if s.used != 0 && s.tid == tid {
			s.used = p.clock
			return s
		}
		if s.used < victim.used {
			victim = s
		}
	}
	*victim = rocksdbStream{tid: tid, used: p.clock, raBytes: p.initial}
	return victim
}

// Handle follows PrefetchIfNeeded for one read.
func (p *rocksdbPolicy) Handle(ev *Event, emit Emit) {
	a := &ev.Access
	if a.Kind != formats.KindRead || p.maxRA == 0 || p.initial == 0 {
		return
	}
	s := p.stream(ev.File, ev.TID)
	first, n := a.Page, max(uint64(a.NPages), 1)
	end := first + n
	seq := s.prevN == 0 || first == s.prevFirst+s.prevN || (first+1 == s.prevFirst+s.prevN && end > s.prevFirst+s.prevN)
	if end <= s.raLimit { // inside the prefetched range
		s.prevFirst, s.prevN = first, n
		return
	}
	s.prevFirst, s.prevN = first, n
	if !seq {
		s.numReads, s.raBytes, s.raLimit = 1, p.initial, 0
		return
	}
	s.numReads++
	if s.numReads <= p.reads {
		return
	}
	s.raBytes = min(s.raBytes, p.maxRA)
	ps := p.env.pageSize()
	raPages := (s.raBytes + ps - 1) / ps
	eof := p.env.eof(ev.File)
	total := n + raPages
	p.norm.AddRange(first, uint32(min(total, 1<<31)))
	s.raLimit = end + raPages
	s.raBytes = min(p.maxRA, s.raBytes*2)
	p.norm.Flush(ev.File, eof, emit)
}
