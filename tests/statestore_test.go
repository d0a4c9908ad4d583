package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// stateRDB is a client of the Redis at addr, closed when the test ends: one server, or
// the seed nodes of a Redis Cluster, comma-separated, as the services read
// PULSE_REDIS_ADDR.
func stateRDB(t testing.TB, addr string) redis.UniversalClient {
	t.Helper()
	rdb := redisx.NewClient(redisx.Config{Addrs: strings.Split(addr, ","),
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at %s (is the stack up? run 'make up'): %v", addr, err)
	}
	return rdb
}

// redisKeys is KEYS pattern on every server holding keys: the one Redis, or each
// master of a Redis Cluster, which lists only its own.
func redisKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb.Keys(ctx, pattern).Result()
	}
	var mu sync.Mutex
	var all []string
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, pattern).Result()
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}

// deleteRedisPrefix deletes every key under prefix, one command per key: on a Redis
// Cluster they lie in many slots.
func deleteRedisPrefix(rdb redis.UniversalClient, prefix string) {
	ctx := context.Background()
	keys, _ := redisKeys(ctx, rdb, prefix+":*")
	pipe := rdb.Pipeline()
	for _, k := range keys {
		pipe.Del(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
}

func stateStore(t testing.TB) (*statestore.Store, redis.UniversalClient) {
	t.Helper()
	rdb := stateRDB(t, harness.RedisAddr())
	prefix := "it-" + harness.RandomID(t)
	t.Cleanup(func() { deleteRedisPrefix(rdb, prefix) })
	return statestore.New(rdb, prefix), rdb
}

// A window is written once: a replay of the same or an older offset writes nothing,
// so a crash between the Redis write and the offset commit cannot regress a user
// (docs/design.md guarantee 7), and every key of a shard carries its hash tag (guarantee 9).
func TestStateStoreWindowIsGuardedByOffset(t *testing.T) {
	ctx := context.Background()
	store, rdb := stateStore(t)
	const shards = 4
	if err := store.RegisterShards(ctx, shards, statestore.DefaultBuckets); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkWhole(ctx, shards); err != nil {
		t.Fatal(err)
	}
	if err := store.RegisterShards(ctx, shards+1, statestore.DefaultBuckets); !errors.Is(err, statestore.ErrShardCountMismatch) {
		t.Fatalf("RegisterShards of a different shard count = %v, want %v", err, statestore.ErrShardCountMismatch)
	}
	if err := store.RegisterShards(ctx, shards, statestore.DefaultBuckets/2); !errors.Is(err, statestore.ErrBucketCountMismatch) {
		t.Fatalf("RegisterShards of a different bucket count = %v, want %v", err, statestore.ErrBucketCountMismatch)
	}

	user := "alice"
	sh := shard.For(user, shards)
	at := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	u := presence.NewUser(0)
	u.Apply(&presence.Event{ID: "e1", UserID: user, Kind: presence.KindStatus, Status: presence.Online, DeviceID: "phone", ReceivedAt: at, Source: presence.SourceAPI})
	u.Offset = 7
	online := roaring.BitmapOf(0)
	win := &statestore.Window{
		Shard: sh, LastOffset: 7, Next: 1,
		NewIDs:  []statestore.NewID{{UserID: user, Index: 0}},
		Users:   map[string]*presence.User{user: u},
		Bitmaps: [3]*roaring.Bitmap{online, roaring.New(), roaring.New()},
		Dirty:   [3]bool{true, false, false},
		Outbox:  &pulsev1.ChangeBatch{Partition: int32(sh), FirstOffset: 7, LastOffset: 7, Changes: []*pulsev1.Change{{UserId: user, EventId: "e1"}}},
	}
	written, err := store.WriteWindow(ctx, win)
	if err != nil || !written {
		t.Fatalf("WriteWindow = %v, %v; want written", written, err)
	}

	// The replay carries an older state of alice; it must not land.
	stale := presence.NewUser(0)
	stale.Offset = 7
	replay := *win
	replay.Users = map[string]*presence.User{user: stale}
	replay.Bitmaps = [3]*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()}
	for _, off := range []int64{7, 3} {
		replay.LastOffset = off
		written, err = store.WriteWindow(ctx, &replay)
		if err != nil || written {
			t.Fatalf("replay at offset %d: WriteWindow = %v, %v; want not written", off, written, err)
		}
	}

	got, err := store.Get(ctx, user)
	if err != nil || got == nil {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if got.Status != presence.Online || !got.LastUpdated.Equal(at) || got.Offset != 7 || len(got.Devices) != 1 || got.Devices[0].ID != "phone" {
		t.Fatalf("state after replay = %+v, want alice online since %v from phone at offset 7", got, at)
	}
	st, err := store.LoadShard(ctx, sh)
	if err != nil {
		t.Fatal(err)
	}
	if st.Offset != 7 || st.Next != 1 || st.Bitmaps[0].GetCardinality() != 1 || !st.Bitmaps[0].Contains(0) ||
		st.Outbox == nil || len(st.Outbox.Changes) != 1 || st.Outbox.Changes[0].EventId != "e1" {
		t.Fatalf("shard state = %+v", st)
	}
	counts, err := store.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts != (statestore.Counts{Registered: 1, Online: 1}) {
		t.Fatalf("counts = %+v, want 1 registered, 1 online", counts)
	}

	// Every key the window wrote carries the shard's hash tag, so it is in the
	// shard's Redis Cluster slot.
	keys, err := redisKeys(ctx, rdb, store.Keys().Prefix+":*")
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf(":{%d}:", sh)
	// Registering gave every shard its bookkeeping; the window wrote only its own.
	keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasSuffix(k, ":meta") && !strings.Contains(k, tag) })
	if len(keys) != 8 {
		t.Errorf("window wrote %d keys, want 8 (shards, buckets, meta, state bucket, rev bucket, online bitmap, counts, outbox): %v", len(keys), keys)
	}
	for _, k := range keys {
		if k != store.Keys().Shards() && k != store.Keys().Buckets() && !strings.Contains(k, tag) {
			t.Errorf("key %s lacks the shard's hash tag %s", k, tag)
		}
	}
}

// GetMany answers users of every shard in request order, nil for unknown users.
func TestStateStoreGetManyAcrossShards(t *testing.T) {
	ctx := context.Background()
	store, _ := stateStore(t)
	const shards = 8
	if err := store.RegisterShards(ctx, shards, statestore.DefaultBuckets); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkWhole(ctx, shards); err != nil {
		t.Fatal(err)
	}
	ids := []string{"u-1", "u-2", "u-3", "u-4", "u-5", "u-6", "u-7", "u-8", "u-9", "u-10"}
	next := map[int]uint32{}
	for i, id := range ids[:8] {
		sh := shard.For(id, shards)
		u := presence.NewUser(next[sh])
		u.LastSeen = time.UnixMicro(int64(i + 1)).UTC()
		w := &statestore.Window{Shard: sh, LastOffset: int64(i), Next: next[sh] + 1,
			Users:   map[string]*presence.User{id: u},
			Bitmaps: [3]*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()}}
		next[sh]++
		if _, err := store.WriteWindow(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	got, err := store.GetMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range got {
		if i < 8 && (u == nil || u.LastSeen.UnixMicro() != int64(i+1)) {
			t.Errorf("GetMany[%d] (%s) = %+v, want last seen %dµs", i, ids[i], u, i+1)
		}
		if i >= 8 && u != nil {
			t.Errorf("GetMany[%d] (%s) = %+v, want nil for an unknown user", i, ids[i], u)
		}
	}
}
