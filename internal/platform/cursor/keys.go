package cursor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// A signed cursor is the cursor followed by a tag: base64url, without padding, of the
// first TagBytes of HMAC-SHA256 over the cursor, keyed with the server's secret. A
// client can hand back only positions the server gave out: a cursor it made up, or
// edited to name another position, is refused before anything is read for it.
const (
	// TagBytes is the length of a cursor's HMAC tag: 96 bits, beyond guessing.
	TagBytes = 12
	// TagLen is the tag's length in a signed cursor.
	TagLen = 16 // base64.RawURLEncoding.EncodedLen(TagBytes)
	// MinSecret is the shortest signing secret accepted, in bytes.
	MinSecret = 32
)

// ErrUnsigned is wrapped by Open's error for a cursor no current key signed.
var ErrUnsigned = fmt.Errorf("%w: not issued by this service, or signed with a retired secret; start again without it", ErrInvalid)

// Keys sign cursors and check their tags. The first key signs; every key is accepted,
// so a new secret can be rolled out to every instance before the one it replaces is
// retired. A nil *Keys signs nothing and accepts cursors as they are.
type Keys struct {
	keys [][]byte
}

// NewKeys makes Keys from secrets, the signing one first; empty secrets are skipped
// (a rotation slot left unset). Each must be MinSecret bytes at least.
func NewKeys(secrets ...string) (*Keys, error) {
	k := &Keys{}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if len(s) < MinSecret {
			return nil, fmt.Errorf("a cursor secret must be at least %d bytes, got %d", MinSecret, len(s))
		}
		k.keys = append(k.keys, []byte(s))
	}
	if len(k.keys) == 0 {
		return nil, errors.New("no cursor secret given")
	}
	return k, nil
}

// RandomKeys are Keys of a secret drawn now: cursors stay valid only within this
// process, which suits a single instance.
func RandomKeys() *Keys {
	b := make([]byte, MinSecret)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return &Keys{keys: [][]byte{b}}
}

// Sign appends c's tag.
func (k *Keys) Sign(c string) string {
	if k == nil {
		return c
	}
	var tag [TagLen]byte
	base64.RawURLEncoding.Encode(tag[:], k.tag(k.keys[0], c))
	return c + string(tag[:])
}

// Open checks the tag of a signed cursor and returns the cursor without it. Its errors
// wrap ErrInvalid (ErrUnsigned for a tag no key made) and never say more.
func (k *Keys) Open(signed string) (string, error) {
	if k == nil {
		return signed, nil
	}
	if len(signed) <= TagLen {
		return "", fmt.Errorf("%w: too short", ErrInvalid)
	}
	c, tagText := signed[:len(signed)-TagLen], signed[len(signed)-TagLen:]
	tag, err := base64.RawURLEncoding.DecodeString(tagText)
	if err != nil || len(tag) != TagBytes {
		return "", ErrUnsigned
	}
	for _, key := range k.keys {
		if hmac.Equal(tag, k.tag(key, c)) {
			return c, nil
		}
	}
	return "", ErrUnsigned
}

func (k *Keys) tag(key []byte, c string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(c))
	return m.Sum(nil)[:TagBytes]
}
