package online

import (
	"context"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// The bitmap cache serves a shard's bitmaps for its TTL, then loads them again.
func TestBitmapCacheExpires(t *testing.T) {
	store := testStore(t)
	f := newFixture(t, store, 2)
	f.set([]testUser{{id: "a", status: presence.Online}}, nil)
	sh := shard.For("a", 2)
	clock := time.Unix(1000, 0)
	c := NewBitmapCache(store, time.Second, func() time.Time { return clock })
	get := func() *statestore.ShardBitmaps {
		bms, err := c.Get(context.Background(), []int{sh})
		if err != nil {
			t.Fatal(err)
		}
		return bms[sh]
	}
	idx := f.users["a"].Index
	if st, ok := get().StatusOf(idx); !ok || st != presence.Online {
		t.Fatalf("a = %v %v, want online", st, ok)
	}
	f.set([]testUser{{id: "a", status: presence.Idle}}, nil)
	clock = clock.Add(999 * time.Millisecond)
	if st, _ := get().StatusOf(idx); st != presence.Online {
		t.Fatalf("within the TTL a = %v, want the cached online", st)
	}
	clock = clock.Add(time.Millisecond)
	if st, _ := get().StatusOf(idx); st != presence.Idle {
		t.Fatalf("after the TTL a = %v, want idle", st)
	}
}
