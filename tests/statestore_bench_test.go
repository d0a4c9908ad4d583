package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// BenchmarkWriteWindow is the aggregator's one Redis round trip per window: 500 user
// states, their changes' bitmaps (a shard of 100,000 users, a third online) and the
// outbox, through the guarded Lua script, against the stack's real Redis.
func BenchmarkWriteWindow(b *testing.B) {
	ctx := context.Background()
	store, _ := stateStore(b)
	if err := store.RegisterShards(ctx, 16, statestore.DefaultBuckets); err != nil {
		b.Fatal(err)
	}
	if err := store.MarkWhole(ctx, 16); err != nil {
		b.Fatal(err)
	}
	users := make(map[string]*presence.User, 500)
	for i := range 500 {
		u := presence.NewUser(uint32(i))
		u.Devices = []presence.Device{{ID: "phone", Status: presence.Online}}
		u.Status = presence.Online
		users[fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", i)] = u
	}
	online := roaring.New()
	for i := uint32(0); i < 100_000; i += 3 {
		online.Add(i)
	}
	offset := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		offset++
		w := &statestore.Window{Shard: 1, LastOffset: offset, Next: 100_000, Users: users,
			Bitmaps: [3]*roaring.Bitmap{online, roaring.New(), roaring.New()}, Dirty: [3]bool{true, false, false}}
		if _, err := store.WriteWindow(ctx, w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(500*float64(b.N)/b.Elapsed().Seconds(), "users/s")
}
