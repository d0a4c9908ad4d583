package cursor

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

var testFormat = Format{Version: 1, MinBody: 2, MaxLen: EncodedLen(64)}

func TestRoundTrip(t *testing.T) {
	for _, body := range [][]byte{{0, 0}, {1, 2, 3}, bytes.Repeat([]byte{0xff}, 64)} {
		s := testFormat.Encode(body)
		if strings.ContainsAny(s, "+/=") {
			t.Errorf("cursor %q is not unpadded base64url", s)
		}
		if len(s) != EncodedLen(len(body)) {
			t.Errorf("cursor %q is %d characters, EncodedLen says %d", s, len(s), EncodedLen(len(body)))
		}
		got, err := testFormat.Decode(s)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("Decode(Encode(%x)) = %x, %v", body, got, err)
		}
	}
	// The listing's cursors were written in this envelope before it was shared: the
	// one the OpenAPI document shows still opens, to the body it was made of.
	if body, err := (Format{Version: 1}).Decode("AQgDgA-XjM3B"); err != nil || !bytes.Equal(body, []byte{8, 3, 0x80, 0x0f}) {
		t.Errorf("the listing's example cursor = %x, %v", body, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := testFormat.Encode([]byte{7, 7, 7, 7})
	raw, _ := base64.RawURLEncoding.DecodeString(good)
	enc := base64.RawURLEncoding.EncodeToString
	flipped := bytes.Clone(raw)
	flipped[1] ^= 1
	for _, tt := range []struct {
		name, cursor, says string
	}{
		{"empty", "", "invalid cursor: empty"},
		{"too long", strings.Repeat("A", testFormat.MaxLen+1), "invalid cursor: longer than 92 characters"},
		{"not base64url", "!!!!", "invalid cursor: not base64url"},
		{"padded", good + "==", "invalid cursor: not base64url"},
		{"standard alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(testFormat.Encode([]byte{0xfb, 0xff})), "invalid cursor: not base64url"},
		{"too short", enc(raw[:6]), "invalid cursor: too short"},
		{"truncated", good[:len(good)-2], "invalid cursor: checksum mismatch"},
		{"flipped bit", enc(flipped), "invalid cursor: checksum mismatch"},
		{"another version", Format{Version: 2}.Encode([]byte{7, 7}), "invalid cursor: unknown version 2"},
	} {
		_, err := testFormat.Decode(tt.cursor)
		if !errors.Is(err, ErrInvalid) || err.Error() != tt.says {
			t.Errorf("%s: Decode(%q) = %v, want %q", tt.name, tt.cursor, err, tt.says)
		}
	}
}

// Whatever a client sends, Decode either refuses it with ErrInvalid or returns a
// body that encodes to a cursor opening to the same body.
func FuzzDecode(f *testing.F) {
	f.Add(testFormat.Encode([]byte{1, 2, 3}))
	f.Add(Format{Version: 2}.Encode(nil))
	f.Add("AQgDgA-XjM3B")
	f.Add("")
	f.Add("AQ\nAAAAcBBQ")
	f.Fuzz(func(t *testing.T, s string) {
		body, err := testFormat.Decode(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if len(body) < testFormat.MinBody || len(s) > testFormat.MaxLen {
			t.Fatalf("accepted %q: a %d-byte body", s, len(body))
		}
		again, err := testFormat.Decode(testFormat.Encode(body))
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("re-encoding %x does not round trip: %x, %v", body, again, err)
		}
	})
}
