package feed

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, offsets := range [][]int64{
		{0},
		{0, 1, 2, 3},
		{math.MaxInt64, 0, 127, 128, 16383, 16384},
		make([]int64, MaxPartitions),
	} {
		fp := TopicFingerprint("presence.changes")
		s := EncodeCursor(fp, offsets)
		if strings.ContainsAny(s, "+/=") {
			t.Errorf("cursor %q is not unpadded base64url", s)
		}
		c, err := DecodeCursor(s)
		if err != nil {
			t.Fatalf("DecodeCursor(EncodeCursor(%v)): %v", offsets, err)
		}
		if c.Topic != fp || !slices.Equal(c.Offsets, offsets) || c.String() != s {
			t.Fatalf("round trip of %v = %+v", offsets, c)
		}
	}
	if a, b := TopicFingerprint("a"), TopicFingerprint("b"); a == b {
		t.Error("two topics share a fingerprint")
	}
	// Cursors clients hold from before the envelope was shared read as they were
	// written, and positions encode to them still.
	for s, want := range map[string]Cursor{
		"AS_N6tsDAAWAgICAgCC8uPIC": {Topic: TopicFingerprint("presence.changes"), Offsets: []int64{0, 5, 1 << 40}},
		"ATsp10oBKp1ZH3A":          {Topic: TopicFingerprint("changes"), Offsets: []int64{42}},
	} {
		c, err := DecodeCursor(s)
		if err != nil || c.Topic != want.Topic || !slices.Equal(c.Offsets, want.Offsets) || want.String() != s {
			t.Errorf("cursor %q = %+v, %v; want %+v, encoding to it", s, c, err, want)
		}
	}
}

func TestDecodeCursorRejects(t *testing.T) {
	good := EncodeCursor(7, []int64{1, 2})
	raw, _ := base64.RawURLEncoding.DecodeString(good)
	reencode := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	flipped := slices.Clone(raw)
	flipped[len(flipped)-5] ^= 1
	for name, s := range map[string]string{
		"empty":          "",
		"not base64":     "!!!!",
		"padded":         good + "==",
		"too short":      reencode(raw[:6]),
		"truncated":      good[:len(good)-2],
		"flipped bit":    reencode(flipped),
		"too long":       strings.Repeat("A", MaxCursorLen+1),
		"wrong version":  withBody([]byte{2, 0, 0, 0, 7, 1, 0}),
		"no partitions":  withBody([]byte{1, 0, 0, 0, 7, 0}),
		"too many":       withBody([]byte{1, 0, 0, 0, 7, 0x81, 0x08}),
		"missing offset": withBody([]byte{1, 0, 0, 0, 7, 2, 5}),
		"trailing bytes": withBody([]byte{1, 0, 0, 0, 7, 1, 5, 9}),
		"offset > int64": withBody(append([]byte{1, 0, 0, 0, 7, 1}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)),
	} {
		if _, err := DecodeCursor(s); !errors.Is(err, ErrBadCursor) {
			t.Errorf("%s: DecodeCursor(%q) = %v, want ErrBadCursor", name, s, err)
		}
	}
}

// withBody appends a valid checksum to body and encodes it.
func withBody(body []byte) string {
	return base64.RawURLEncoding.EncodeToString(binary.BigEndian.AppendUint32(body, crc32.ChecksumIEEE(body)))
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add(EncodeCursor(1, []int64{0, 5, 1 << 40}))
	f.Add(EncodeCursor(TopicFingerprint("x"), make([]int64, 16)))
	f.Add("")
	f.Add("AQAAAAcBBQ")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := DecodeCursor(s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("error %v does not wrap ErrBadCursor", err)
			}
			return
		}
		if len(c.Offsets) == 0 || len(c.Offsets) > MaxPartitions {
			t.Fatalf("decoded %d partitions", len(c.Offsets))
		}
		for _, o := range c.Offsets {
			if o < 0 {
				t.Fatalf("negative offset %d", o)
			}
		}
		again, err := DecodeCursor(c.String())
		if err != nil || again.Topic != c.Topic || !slices.Equal(again.Offsets, c.Offsets) {
			t.Fatalf("re-encoding %+v does not round trip: %+v, %v", c, again, err)
		}
	})
}
