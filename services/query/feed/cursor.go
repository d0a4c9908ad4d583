package feed

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/pulse-presence/pulse/internal/platform/cursor"
)

// A cursor is where a client stands in presence.changes: for every partition, the
// next offset it has not yet been given. Clients treat it as opaque; it is Pulse's
// cursor envelope (package cursor: version 1, base64url, crc-32) around
//
//	fnv-32a of the topic name (4 bytes, big endian)
//	| partition count (uvarint) | next offset of each partition (uvarint)
//
// The topic fingerprint keeps a cursor from one deployment from being applied to
// another's log; the checksum turns a truncated or mangled cursor into a 400 instead
// of a wrong position.

const (
	// MaxPartitions bounds the partition count a cursor may name, and so its size.
	MaxPartitions = 1024
	// MaxCursorLen bounds an encoded cursor: 1+4+2+10 bytes per partition+4, in base64.
	MaxCursorLen = (1 + 4 + 2 + 10*MaxPartitions + 4 + 2) * 4 / 3
)

// cursorFormat is the envelope of the feed's cursors; the shortest body names one
// partition.
var cursorFormat = cursor.Format{Version: 1, MinBody: 4 + 1, MaxLen: MaxCursorLen}

// Cursor is a decoded cursor: the topic's fingerprint and the next offset of every
// partition, indexed by partition.
type Cursor struct {
	Topic   uint32
	Offsets []int64
}

// ErrBadCursor is wrapped by every decoding error; it is the envelope's
// cursor.ErrInvalid.
var ErrBadCursor = cursor.ErrInvalid

// TopicFingerprint is the fingerprint a cursor carries for topic.
func TopicFingerprint(topic string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(topic))
	return h.Sum32()
}

// EncodeCursor encodes the position offsets (next offset per partition) in topic.
func EncodeCursor(topic uint32, offsets []int64) string {
	// The hub encodes a cursor per change it applies: a body of a few partitions
	// stays on the stack.
	var buf [64]byte
	b := binary.BigEndian.AppendUint32(buf[:0], topic)
	b = binary.AppendUvarint(b, uint64(len(offsets)))
	for _, o := range offsets {
		b = binary.AppendUvarint(b, uint64(max(o, 0)))
	}
	return cursorFormat.Encode(b)
}

// String encodes c.
func (c Cursor) String() string { return EncodeCursor(c.Topic, c.Offsets) }

// DecodeCursor decodes what EncodeCursor made. It checks the cursor's form only;
// whether it fits a log (topic, partitions, offsets) is the hub's to judge. Its
// errors go to clients, so they say what is wrong without naming partitions or
// offsets.
func DecodeCursor(s string) (Cursor, error) {
	body, err := cursorFormat.Decode(s)
	if err != nil {
		return Cursor{}, err
	}
	c := Cursor{Topic: binary.BigEndian.Uint32(body[:4])}
	rest := body[4:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n == 0 || n > MaxPartitions {
		return Cursor{}, fmt.Errorf("%w: bad partition count", ErrBadCursor)
	}
	rest = rest[k:]
	c.Offsets = make([]int64, n)
	for i := range c.Offsets {
		o, k := binary.Uvarint(rest)
		if k <= 0 || o > math.MaxInt64 {
			return Cursor{}, fmt.Errorf("%w: bad offset", ErrBadCursor)
		}
		c.Offsets[i] = int64(o)
		rest = rest[k:]
	}
	if len(rest) != 0 {
		return Cursor{}, fmt.Errorf("%w: trailing bytes", ErrBadCursor)
	}
	return c, nil
}
