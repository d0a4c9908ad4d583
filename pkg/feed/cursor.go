package feed

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math"
)

// A cursor is where a client stands in presence.changes: for every partition, the
// next offset it has not yet been given. Clients treat it as opaque; it is
// base64url (no padding) of
//
//	version (1 byte, 1) | fnv-32a of the topic name (4 bytes, big endian)
//	| partition count (uvarint) | next offset of each partition (uvarint)
//	| crc-32 (IEEE) of everything before it (4 bytes, big endian)
//
// The topic fingerprint keeps a cursor from one deployment from being applied to
// another's log; the checksum turns a truncated or mangled cursor into a 400 instead
// of a wrong position.

const (
	cursorVersion = 1
	// MaxPartitions bounds the partition count a cursor may name, and so its size.
	MaxPartitions = 1024
	// MaxCursorLen bounds an encoded cursor: 1+4+2+10 bytes per partition+4, in base64.
	MaxCursorLen = (1 + 4 + 2 + 10*MaxPartitions + 4 + 2) * 4 / 3
)

// Cursor is a decoded cursor: the topic's fingerprint and the next offset of every
// partition, indexed by partition.
type Cursor struct {
	Topic   uint32
	Offsets []int64
}

// ErrBadCursor is wrapped by every decoding error.
var ErrBadCursor = errors.New("invalid cursor")

// TopicFingerprint is the fingerprint a cursor carries for topic.
func TopicFingerprint(topic string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(topic))
	return h.Sum32()
}

// EncodeCursor encodes the position offsets (next offset per partition) in topic.
func EncodeCursor(topic uint32, offsets []int64) string {
	b := make([]byte, 0, 1+4+binary.MaxVarintLen32+len(offsets)*4+4)
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint32(b, topic)
	b = binary.AppendUvarint(b, uint64(len(offsets)))
	for _, o := range offsets {
		b = binary.AppendUvarint(b, uint64(max(o, 0)))
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

// String encodes c.
func (c Cursor) String() string { return EncodeCursor(c.Topic, c.Offsets) }

// DecodeCursor decodes what EncodeCursor made. It checks the cursor's form only;
// whether it fits a log (topic, partitions, offsets) is the hub's to judge.
func DecodeCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, fmt.Errorf("%w: empty", ErrBadCursor)
	}
	if len(s) > MaxCursorLen {
		return Cursor{}, fmt.Errorf("%w: longer than %d characters", ErrBadCursor, MaxCursorLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, fmt.Errorf("%w: not base64url", ErrBadCursor)
	}
	if len(b) < 1+4+1+4 {
		return Cursor{}, fmt.Errorf("%w: too short", ErrBadCursor)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return Cursor{}, fmt.Errorf("%w: checksum mismatch", ErrBadCursor)
	}
	if body[0] != cursorVersion {
		return Cursor{}, fmt.Errorf("%w: unknown version %d", ErrBadCursor, body[0])
	}
	c := Cursor{Topic: binary.BigEndian.Uint32(body[1:5])}
	rest := body[5:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n == 0 || n > MaxPartitions {
		return Cursor{}, fmt.Errorf("%w: bad partition count", ErrBadCursor)
	}
	rest = rest[k:]
	c.Offsets = make([]int64, n)
	for i := range c.Offsets {
		o, k := binary.Uvarint(rest)
		if k <= 0 || o > math.MaxInt64 {
			return Cursor{}, fmt.Errorf("%w: bad offset of partition %d", ErrBadCursor, i)
		}
		c.Offsets[i] = int64(o)
		rest = rest[k:]
	}
	if len(rest) != 0 {
		return Cursor{}, fmt.Errorf("%w: %d trailing bytes", ErrBadCursor, len(rest))
	}
	return c, nil
}
