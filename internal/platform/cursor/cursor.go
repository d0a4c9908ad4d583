// Package cursor is the envelope every opaque cursor Pulse hands out shares: the
// listing's next page (GET /v1/online) and the change feed's resume position
// (GET /v1/watch). Clients keep a cursor and send it back without reading into it,
// so what comes back may be truncated, mistyped, another API's, or made up; the
// envelope turns all of those into an error that says which, before the owner reads
// a position out of it.
//
// A cursor is base64url, without padding, of
//
//	version (1 byte) | body | crc-32 (IEEE) of version and body (4 bytes, big endian)
//
// The body is the owner's layout, and the version names it: a new layout takes a new
// version, so a cursor is never read with a layout it was not written in. The
// checksum makes a mangled cursor fail instead of naming another position.
package cursor

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// ErrInvalid is wrapped by every error Decode returns; owners wrap it too for bodies
// that do not fit their layout.
var ErrInvalid = errors.New("invalid cursor")

// overhead is the envelope's bytes around the body: version and checksum.
const overhead = 1 + 4

// Format is one owner's cursor layout.
type Format struct {
	// Version is the layout's first byte; Decode refuses any other.
	Version byte
	// MinBody is the fewest body bytes the layout has; shorter cursors are refused as
	// too short before their checksum is looked at.
	MinBody int
	// MaxLen bounds an encoded cursor, so an oversized one is refused before it is
	// decoded; 0 leaves it unbounded.
	MaxLen int
}

// EncodedLen is the length of the cursor of a body of n bytes.
func EncodedLen(n int) int { return base64.RawURLEncoding.EncodedLen(overhead + n) }

// Encode wraps body in the envelope.
func (f Format) Encode(body []byte) string {
	b := make([]byte, 0, overhead+len(body))
	b = append(b, f.Version)
	b = append(b, body...)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode checks s's envelope and returns its body. The errors wrap ErrInvalid and say
// what is wrong, in words a client can act on.
func (f Format) Decode(s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalid)
	}
	if f.MaxLen > 0 && len(s) > f.MaxLen {
		return nil, fmt.Errorf("%w: longer than %d characters", ErrInvalid, f.MaxLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64url", ErrInvalid)
	}
	if len(b) < overhead+f.MinBody {
		return nil, fmt.Errorf("%w: too short", ErrInvalid)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrInvalid)
	}
	if body[0] != f.Version {
		return nil, fmt.Errorf("%w: unknown version %d", ErrInvalid, body[0])
	}
	return body[1:], nil
}
