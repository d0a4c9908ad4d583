package scale

import (
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// TestScaleShardWindows checks the windows the bulk load writes: indexes continue
// from one window to the next, the online bitmap is cumulative, offsets count windows.
func TestScaleShardWindows(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &scaleShard{online: roaring.New()}
	first := s.window(3, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0.3, now)
	second := s.window(3, []int{20, 21, 22}, 0.3, now)

	online := 0
	for _, i := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 21, 22} {
		if Online(i, 0.3) {
			online++
		}
	}
	if second.Shard != 3 || second.LastOffset != 1 || second.Next != 13 || s.offset != 2 {
		t.Fatalf("second window: shard %d, last offset %d, next %d; shard offset %d", second.Shard, second.LastOffset, second.Next, s.offset)
	}
	if got := second.Bitmaps[0].GetCardinality(); got != uint64(online) || second.Bitmaps[0] != first.Bitmaps[0] {
		t.Fatalf("online bitmap holds %d, want %d, shared by both windows", got, online)
	}
	u := second.Users["u21"]
	if u == nil || u.Index != 11 || second.NewIDs[1].UserID != "u21" || second.NewIDs[1].Index != 11 {
		t.Fatalf("u21 = %+v, new ids %+v", u, second.NewIDs)
	}
	if want := seen(21, Online(21, 0.3), now); !u.LastSeen.Equal(want) || !u.LastUpdated.Equal(want) {
		t.Fatalf("u21 seen %v, updated %v, want %v", u.LastSeen, u.LastUpdated, want)
	}
	if (u.Status == presence.Online) != Online(21, 0.3) {
		t.Fatalf("u21 status %v", u.Status)
	}
}
func TestScaleOnlineFraction(t *testing.T) {
	n := 0
	for i := range 100000 {
		if Online(i, 0.3) {
			n++
		}
	}
	if n < 29000 || n > 31000 {
		t.Fatalf("%d of 100000 online at 0.3", n)
	}
}
