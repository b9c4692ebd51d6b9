// Package hints sends application hints to a running `predictio record`.
//
// An instrumented program dials the recorder's hint socket (the path given
// to `predictio record --hints unix:PATH`) and sends typed hints: which tree
// node a search is entering, where tensors live in a file, which layer a
// model is starting. The recorder stamps each hint with CLOCK_MONOTONIC on
// arrival, so hints line up with the page accesses it records.
//
// Sending never blocks the program: a hint the recorder cannot take now
// (its queue is full because it is slow, stopped or stuck, or no recorder
// listens) is dropped and counted (Client.Dropped), the recorder is told the
// count with a later datagram, and the client reconnects by itself, at most
// once per Dialer.ReconnectInterval, when a recorder comes back.
//
// The package has no dependency on the recorder. The wire format is
// specified in docs/hints.md; hints/predictio_hints.h is the same client for
// C programs. Needs Linux (Unix datagram sockets, SCM_RIGHTS for FD files).
package hints

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire format constants (docs/hints.md).
const (
	// Magic is the first 4 bytes of every datagram: "PIOH" in memory order.
	Magic uint32 = 0x484f4950
	// Version is the wire format version this package writes and reads.
	Version = 1
	// HeaderSize is the size of the fixed header.
	HeaderSize = 16
	// MaxDatagram is the largest datagram a recorder accepts.
	MaxDatagram = 16384
	// MaxPath is the longest file path a hint may carry.
	MaxPath = 4095
	// MaxChildren is the most child pages one tree_child_enter may carry.
	MaxChildren = 1024
	// MaxName is the longest tensor name.
	MaxName = 1024
)

// Kind is the type of a hint. Hint kinds (below 128) equal formats.HintKind;
// kinds from 128 on are control datagrams.
type Kind uint8

// Hint kinds.
const (
	KindTreeChildEnter Kind = 1
	KindTensorLayout   Kind = 2
	KindLayerStart     Kind = 3
	// KindDropReport is not a hint but a control datagram (kinds from 128
	// on, so that hint kinds can keep equalling formats.HintKind): a
	// client's count of the hints it dropped since its previous report was
	// queued (docs/hints.md, "drop_report"). It names no file. Servers
	// older than this kind count it as malformed and lose nothing else.
	KindDropReport Kind = 128
)

func (k Kind) String() string {
	switch k {
	case KindTreeChildEnter:
		return "tree_child_enter"
	case KindTensorLayout:
		return "tensor_layout"
	case KindLayerStart:
		return "layer_start"
	case KindDropReport:
		return "drop_report"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// FlagFD in the header's flags says the hint's file is the one file
// descriptor passed with the datagram (SCM_RIGHTS) and the payload carries
// no path.
const FlagFD uint16 = 1

// Decoding errors. Decode wraps them with the field at fault.
var (
	ErrTruncated = errors.New("truncated hint")
	ErrMalformed = errors.New("malformed hint")
	ErrTooLarge  = errors.New("hint too large")
	ErrVersion   = errors.New("unsupported hint version")
)

// Message is one decoded hint. Path and Name alias the decoded buffer;
// Children reuses its backing array across Decode calls.
type Message struct {
	Kind       Kind
	Flags      uint16
	Path       []byte   // file path; empty when Flags has FlagFD
	ParentPage uint64   // tree_child_enter
	Position   uint32   // tree_child_enter: child position within the parent
	Children   []uint64 // tree_child_enter: upcoming child pages, after Position
	Name       []byte   // tensor_layout
	Offset     uint64   // tensor_layout: byte offset in the file
	Length     uint64   // tensor_layout: byte length
	Layer      uint32   // layer_start
	QueueFull  uint64   // drop_report: hints dropped because the socket's queue was full
	NoServer   uint64   // drop_report: hints dropped because nothing listened at the socket
}

// Decode parses one datagram into m. It never panics and allocates only when
// m.Children must grow (at most MaxChildren entries).
func Decode(b []byte, m *Message) error {
	if len(b) > MaxDatagram {
		return fmt.Errorf("decode hint: %d bytes exceeds %d: %w", len(b), MaxDatagram, ErrTooLarge)
	}
	if len(b) < HeaderSize {
		return fmt.Errorf("decode hint: header: %d of %d bytes: %w", len(b), HeaderSize, ErrTruncated)
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:4]) != Magic {
		return fmt.Errorf("decode hint: magic %#x: %w", le.Uint32(b[0:4]), ErrMalformed)
	}
	if b[4] != Version {
		return fmt.Errorf("decode hint: version %d: %w", b[4], ErrVersion)
	}
	m.Kind = Kind(b[5])
	m.Flags = le.Uint16(b[6:8])
	plen := le.Uint32(b[8:12])
	if le.Uint32(b[12:16]) != 0 {
		return fmt.Errorf("decode hint: reserved field not zero: %w", ErrMalformed)
	}
	if m.Flags&^FlagFD != 0 {
		return fmt.Errorf("decode hint: unknown flags %#x: %w", m.Flags, ErrMalformed)
	}
	p := b[HeaderSize:]
	if uint64(plen) > uint64(len(p)) {
		return fmt.Errorf("decode hint: payload_len %d, datagram has %d: %w", plen, len(p), ErrTruncated)
	}
	if uint64(plen) < uint64(len(p)) {
		return fmt.Errorf("decode hint: payload_len %d, datagram has %d: %w", plen, len(p), ErrMalformed)
	}
	m.Path, m.Name, m.Children = nil, nil, m.Children[:0]
	if m.Kind == KindDropReport {
		return decodeDropReport(p, m)
	}
	if m.Flags&FlagFD == 0 {
		if len(p) < 2 {
			return fmt.Errorf("decode hint: path_len: %w", ErrTruncated)
		}
		n := int(le.Uint16(p))
		p = p[2:]
		if n == 0 || n > MaxPath {
			return fmt.Errorf("decode hint: path_len %d not in 1..%d: %w", n, MaxPath, ErrMalformed)
		}
		if len(p) < n {
			return fmt.Errorf("decode hint: path: %w", ErrTruncated)
		}
		m.Path = p[:n]
		for _, c := range m.Path {
			if c == 0 {
				return fmt.Errorf("decode hint: path contains NUL: %w", ErrMalformed)
			}
		}
		p = p[n:]
	}
	switch m.Kind {
	case KindTreeChildEnter:
		if len(p) < 16 {
			return fmt.Errorf("decode hint: tree_child_enter fields: %w", ErrTruncated)
		}
		m.ParentPage = le.Uint64(p)
		m.Position = le.Uint32(p[8:])
		n := le.Uint32(p[12:])
		p = p[16:]
		if n > MaxChildren {
			return fmt.Errorf("decode hint: n_children %d exceeds %d: %w", n, MaxChildren, ErrTooLarge)
		}
		if uint64(len(p)) != uint64(n)*8 {
			if uint64(len(p)) < uint64(n)*8 {
				return fmt.Errorf("decode hint: children: %w", ErrTruncated)
			}
			return fmt.Errorf("decode hint: %d trailing bytes: %w", len(p)-int(n)*8, ErrMalformed)
		}
		for i := 0; i < int(n); i++ {
			m.Children = append(m.Children, le.Uint64(p[i*8:]))
		}
		return nil
	case KindTensorLayout:
		if len(p) < 18 {
			return fmt.Errorf("decode hint: tensor_layout fields: %w", ErrTruncated)
		}
		m.Offset = le.Uint64(p)
		m.Length = le.Uint64(p[8:])
		n := int(le.Uint16(p[16:]))
		p = p[18:]
		if n > MaxName {
			return fmt.Errorf("decode hint: name_len %d exceeds %d: %w", n, MaxName, ErrTooLarge)
		}
		if len(p) != n {
			if len(p) < n {
				return fmt.Errorf("decode hint: name: %w", ErrTruncated)
			}
			return fmt.Errorf("decode hint: %d trailing bytes: %w", len(p)-n, ErrMalformed)
		}
		m.Name = p
		return nil
	case KindLayerStart:
		if len(p) < 4 {
			return fmt.Errorf("decode hint: layer_start fields: %w", ErrTruncated)
		}
		if len(p) > 4 {
			return fmt.Errorf("decode hint: %d trailing bytes: %w", len(p)-4, ErrMalformed)
		}
		m.Layer = le.Uint32(p)
		return nil
	}
	return fmt.Errorf("decode hint: kind %d: %w", b[5], ErrMalformed)
}

// decodeDropReport parses a drop_report payload: two u64 counts, no file.
func decodeDropReport(p []byte, m *Message) error {
	if m.Flags != 0 {
		return fmt.Errorf("decode hint: drop_report with flags %#x: %w", m.Flags, ErrMalformed)
	}
	if len(p) < 16 {
		return fmt.Errorf("decode hint: drop_report fields: %w", ErrTruncated)
	}
	if len(p) > 16 {
		return fmt.Errorf("decode hint: %d trailing bytes: %w", len(p)-16, ErrMalformed)
	}
	m.QueueFull = binary.LittleEndian.Uint64(p)
	m.NoServer = binary.LittleEndian.Uint64(p[8:])
	return nil
}

// appendHeader appends a header with a zero payload_len; finish fills it.
func appendHeader(dst []byte, k Kind, flags uint16) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, Magic)
	dst = append(dst, Version, byte(k))
	dst = binary.LittleEndian.AppendUint16(dst, flags)
	return append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
}

func appendPath(dst []byte, path string) ([]byte, error) {
	if len(path) == 0 || len(path) > MaxPath {
		return dst, fmt.Errorf("encode hint: path length %d not in 1..%d: %w", len(path), MaxPath, ErrMalformed)
	}
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(path)))
	return append(dst, path...), nil
}

func finish(dst []byte, start int) []byte {
	binary.LittleEndian.PutUint32(dst[start+8:], uint32(len(dst)-start-HeaderSize))
	return dst
}

func flagsFor(path string) uint16 {
	if path == "" {
		return FlagFD
	}
	return 0
}

// AppendTreeChildEnter appends a tree_child_enter datagram to dst. An empty
// path means the file travels as an SCM_RIGHTS descriptor (FlagFD).
func AppendTreeChildEnter(dst []byte, path string, parentPage uint64, position uint32, children []uint64) ([]byte, error) {
	if len(children) > MaxChildren {
		return dst, fmt.Errorf("encode hint: %d children exceed %d: %w", len(children), MaxChildren, ErrTooLarge)
	}
	start := len(dst)
	dst = appendHeader(dst, KindTreeChildEnter, flagsFor(path))
	var err error
	if path != "" {
		if dst, err = appendPath(dst, path); err != nil {
			return dst[:start], err
		}
	}
	dst = binary.LittleEndian.AppendUint64(dst, parentPage)
	dst = binary.LittleEndian.AppendUint32(dst, position)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(children)))
	for _, c := range children {
		dst = binary.LittleEndian.AppendUint64(dst, c)
	}
	return finish(dst, start), nil
}

// AppendTensorLayout appends a tensor_layout datagram to dst.
func AppendTensorLayout(dst []byte, path, name string, offset, length uint64) ([]byte, error) {
	if len(name) > MaxName {
		return dst, fmt.Errorf("encode hint: tensor name of %d bytes exceeds %d: %w", len(name), MaxName, ErrTooLarge)
	}
	start := len(dst)
	dst = appendHeader(dst, KindTensorLayout, flagsFor(path))
	var err error
	if path != "" {
		if dst, err = appendPath(dst, path); err != nil {
			return dst[:start], err
		}
	}
	dst = binary.LittleEndian.AppendUint64(dst, offset)
	dst = binary.LittleEndian.AppendUint64(dst, length)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(name)))
	dst = append(dst, name...)
	return finish(dst, start), nil
}

// AppendLayerStart appends a layer_start datagram to dst.
func AppendLayerStart(dst []byte, path string, layer uint32) ([]byte, error) {
	start := len(dst)
	dst = appendHeader(dst, KindLayerStart, flagsFor(path))
	var err error
	if path != "" {
		if dst, err = appendPath(dst, path); err != nil {
			return dst[:start], err
		}
	}
	dst = binary.LittleEndian.AppendUint32(dst, layer)
	return finish(dst, start), nil
}

// AppendDropReport appends a drop_report datagram to dst: queueFull hints
// were dropped because the socket's queue was full and noServer because
// nothing listened at it, since the sender's previous report was sent.
func AppendDropReport(dst []byte, queueFull, noServer uint64) []byte {
	start := len(dst)
	dst = appendHeader(dst, KindDropReport, 0)
	dst = binary.LittleEndian.AppendUint64(dst, queueFull)
	dst = binary.LittleEndian.AppendUint64(dst, noServer)
	return finish(dst, start)
}
