package online

import (
	"context"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/servertest"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// testStore is a store under a prefix of its own in the Redis of internal/platform/servertest.Redis.
func testStore(t *testing.T) *statestore.Store {
	t.Helper()
	rdb, prefix := servertest.Redis(t, nil)
	return statestore.New(rdb, prefix)
}

// testUser is a user as the tests place it in the state.
type testUser struct {
	id         string
	status     presence.Status
	lastActive time.Time
}

// fixture writes users' state the way the aggregator does, one window per shard, and
// can change their statuses later.
type fixture struct {
	t       *testing.T
	store   *statestore.Store
	shards  int
	offset  []int64
	next    []uint32
	bitmaps [][len(statestore.Tracked)]*roaring.Bitmap
	users   map[string]*presence.User
}

func newFixture(t *testing.T, store *statestore.Store, shards int) *fixture {
	t.Helper()
	if err := store.RegisterShards(context.Background(), shards, statestore.DefaultBuckets); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkWhole(context.Background(), shards); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, store: store, shards: shards, offset: make([]int64, shards), next: make([]uint32, shards),
		bitmaps: make([][len(statestore.Tracked)]*roaring.Bitmap, shards), users: map[string]*presence.User{}}
	for sh := range shards {
		for i := range statestore.Tracked {
			f.bitmaps[sh][i] = roaring.New()
		}
	}
	return f
}

// set gives users their statuses; new users get the next index of their shard, after
// gap indexes left to users who never come online.
func (f *fixture) set(users []testUser, gap func() uint32) {
	f.t.Helper()
	wins := make([]*statestore.Window, f.shards)
	for _, tu := range users {
		sh := shard.For(tu.id, f.shards)
		w := wins[sh]
		if w == nil {
			w = &statestore.Window{Shard: sh, Users: map[string]*presence.User{}}
			wins[sh] = w
		}
		u, ok := f.users[tu.id]
		if !ok {
			if gap != nil {
				f.next[sh] += gap()
			}
			u = presence.NewUser(f.next[sh])
			w.NewIDs = append(w.NewIDs, statestore.NewID{UserID: tu.id, Index: f.next[sh]})
			f.next[sh]++
			f.users[tu.id] = u
		}
		if p := statestore.TrackedPos(u.Status); p >= 0 {
			f.bitmaps[sh][p].Remove(u.Index)
		}
		u.Status, u.LastActive, u.LastSeen, u.LastUpdated = tu.status, tu.lastActive, tu.lastActive, tu.lastActive
		u.Invisible = tu.status == presence.Invisible
		if p := statestore.TrackedPos(tu.status); p >= 0 {
			f.bitmaps[sh][p].Add(u.Index)
		}
		w.Users[tu.id] = u
	}
	for sh, w := range wins {
		if w == nil {
			continue
		}
		f.offset[sh]++
		w.LastOffset, w.Next = f.offset[sh], f.next[sh]
		w.Bitmaps = f.bitmaps[sh]
		w.Dirty = [len(statestore.Tracked)]bool{true, true, true}
		if ok, err := f.store.WriteWindow(context.Background(), w); err != nil || !ok {
			f.t.Fatalf("writing window of shard %d: %v, %v", sh, ok, err)
		}
	}
}
