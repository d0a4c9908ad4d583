package online

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/pulse-presence/pulse/internal/platform/cursor"
)

// Position is where a walk goes on: the next bitmap index to look at in Shard.
// Shard equal to the shard count means the walk is complete.
type Position struct {
	Shard int
	From  uint32
}

// Cursor is a Position with the shard count it belongs to: under another shard count
// the same indexes name other users.
type Cursor struct {
	Shards int
	Pos    Position
}

// cursorFormat is the listing's cursor: Pulse's cursor envelope (package cursor:
// version 1, base64url, crc-32) around the shard count, the shard and the next index,
// as uvarints. The longest body it accepts is three of the longest uvarints.
var cursorFormat = cursor.Format{Version: 1, MinBody: 3, MaxLen: cursor.EncodedLen(3 * binary.MaxVarintLen64)}

// Encode is c as a client carries it.
func (c Cursor) Encode() string {
	var buf [3 * binary.MaxVarintLen64]byte
	b := binary.AppendUvarint(buf[:0], uint64(c.Shards))
	b = binary.AppendUvarint(b, uint64(c.Pos.Shard))
	b = binary.AppendUvarint(b, uint64(c.Pos.From))
	return cursorFormat.Encode(b)
}

// DecodeCursor reads what Encode made. Its errors wrap cursor.ErrInvalid; whether the
// cursor fits the state's shard count now is the caller's to judge.
func DecodeCursor(s string) (Cursor, error) {
	body, err := cursorFormat.Decode(s)
	if err != nil {
		return Cursor{}, err
	}
	var v [3]uint64
	for i := range v {
		x, n := binary.Uvarint(body)
		if n <= 0 {
			return Cursor{}, fmt.Errorf("%w: bad number %d", cursor.ErrInvalid, i)
		}
		v[i], body = x, body[n:]
	}
	switch {
	case len(body) != 0:
		return Cursor{}, fmt.Errorf("%w: %d trailing bytes", cursor.ErrInvalid, len(body))
	case v[0] == 0 || v[0] > math.MaxInt32:
		return Cursor{}, fmt.Errorf("%w: bad shard count", cursor.ErrInvalid)
	case v[1] >= v[0]:
		return Cursor{}, fmt.Errorf("%w: shard %d of %d", cursor.ErrInvalid, v[1], v[0])
	case v[2] > math.MaxUint32:
		return Cursor{}, fmt.Errorf("%w: bad index", cursor.ErrInvalid)
	}
	return Cursor{Shards: int(v[0]), Pos: Position{Shard: int(v[1]), From: uint32(v[2])}}, nil
}
