package record

import (
	"github.com/predictio/predictio/formats"
)

// memSink is an in-memory bundleWriter for tests that only need rows.
type memSink struct {
	man      formats.Manifest
	files    []formats.File
	accesses []formats.Access
	hints    []formats.Hint
	closed   bool
	keep     bool // keep rows (false: count only, for benchmarks)
	n        int
}

func (m *memSink) AddFile(f formats.File) error { m.files = append(m.files, f); return nil }
func (m *memSink) Append(a *formats.Access) error {
	m.n++
	if m.keep {
		m.accesses = append(m.accesses, *a)
	}
	return nil
}
func (m *memSink) AppendHint(h *formats.Hint) error {
	c := *h
	c.Children = append([]uint64(nil), h.Children...)
	m.hints = append(m.hints, c)
	return nil
}
func (m *memSink) Flush() error                { return nil }
func (m *memSink) Manifest() *formats.Manifest { return &m.man }
func (m *memSink) Close() error                { m.closed = true; return nil }
func (m *memSink) Abort() error                { return nil }
