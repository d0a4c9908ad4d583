package online

import (
	"errors"
	"math"
	"testing"

	"github.com/pulse-presence/pulse/internal/platform/cursor"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []Cursor{
		{Shards: 1, Pos: Position{}},
		{Shards: 16, Pos: Position{Shard: 15, From: math.MaxUint32}},
		{Shards: 1024, Pos: Position{Shard: 700, From: 123456}},
		{Shards: math.MaxInt32, Pos: Position{Shard: math.MaxInt32 - 1, From: math.MaxUint32}},
	} {
		got, err := DecodeCursor(c.Encode())
		if err != nil || got != c {
			t.Errorf("decode(encode(%+v)) = %+v, %v", c, got, err)
		}
	}
	// The document's example is a real cursor, issued before the envelope was shared.
	if c, err := DecodeCursor("AQgDgA-XjM3B"); err != nil || c != (Cursor{Shards: 8, Pos: Position{Shard: 3, From: 1920}}) {
		t.Errorf("the OpenAPI example cursor = %+v, %v", c, err)
	}
	if s := (Cursor{Shards: 8, Pos: Position{Shard: 3, From: 1920}}).Encode(); s != "AQgDgA-XjM3B" {
		t.Errorf("the OpenAPI example position encodes to %q", s)
	}
	for _, bad := range []string{
		"", "!!!", "AA", // not ours
		Cursor{Shards: 4, Pos: Position{Shard: 4}}.Encode(), // shard beyond the count
		Cursor{Shards: 4}.Encode() + "A",                    // trailing data
		Cursor{}.Encode(),                                   // no shards
		"AgQAAIxEv0s",                                       // another version, checksum right
		"AQgDgA-XjM3C",                                      // a mangled character
		"AQgDgA-XjM3",                                       // truncated
		cursorFormat.Encode([]byte{0x80, 0x80, 0x80, 0x80, 0x10, 0, 0}),                   // 2^32 shards
		cursorFormat.Encode([]byte{2, 1, 0x80, 0x80, 0x80, 0x80, 0x10}),                   // index beyond uint32
		cursorFormat.Encode([]byte{2, 1}),                                                 // a number missing
		cursorFormat.Encode([]byte{2, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), // a runaway uvarint
	} {
		if c, err := DecodeCursor(bad); !errors.Is(err, cursor.ErrInvalid) {
			t.Errorf("DecodeCursor(%q) = %+v, %v; want an invalid cursor", bad, c, err)
		}
	}
}

// Whatever a client sends as a cursor is refused as invalid or names a position
// within its shard count that encodes back to a cursor naming the same position.
func FuzzDecodeCursor(f *testing.F) {
	f.Add("AQgDgA-XjM3B")
	f.Add(Cursor{Shards: 1024, Pos: Position{Shard: 700, From: 123456}}.Encode())
	f.Add("AgQAAIxEv0s")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := DecodeCursor(s)
		if err != nil {
			if !errors.Is(err, cursor.ErrInvalid) {
				t.Fatalf("error %v does not wrap cursor.ErrInvalid", err)
			}
			return
		}
		if c.Shards < 1 || c.Pos.Shard < 0 || c.Pos.Shard >= c.Shards {
			t.Fatalf("decoded %q to %+v", s, c)
		}
		if again, err := DecodeCursor(c.Encode()); err != nil || again != c {
			t.Fatalf("re-encoding %+v does not round trip: %+v, %v", c, again, err)
		}
	})
}
